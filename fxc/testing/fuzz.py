"""Random-graph differential fuzzing of the torch.compile backend.

A case is a random straight-line program of torch ops over random shapes: elementwise ops with
broadcasting, reductions, scans (cumsum/cumprod/logcumsumexp/cummax), softmax/layer-norm, matmul/linear, conv2d,
pooling, and reshape/permute/slice/cat/expand. It is compiled with `torch.compile(backend="fxc")` and compared with
eager. A failing case is shrunk to a minimal program and saved as a JSON reproducer (tests/regressions/
runs every saved one).

    .venv/bin/python -m fxc.testing.fuzz --count N --seed S [--batch 8] [--save-dir tests/regressions]

Programs are compiled `--batch` at a time as one function (one trace, one build; independent programs do
not fuse with each other); a batch with a failure is re-checked program by program.

A program is plain JSON: `{"seed", "inputs": [shape, ...], "steps": [{"op", "args", "params"}],
"outputs": [ref, ...], "grad"?}` (`--grad`: gradients are compared too), where a ref indexes the values (inputs
first, then one value per step).
Before it runs, each case is written to `<save-dir>/.fuzz_current-<seed>.json`, so a case that kills the
process (segfault) is not lost. `--jobs N` runs N shards of the seeds in parallel processes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..capture.torch.recorder import recording
from ..runtime.store import atomic_write

MAX_NUMEL = 4096
RTOL, ATOL = 1e-4, 1e-4    # relative to the largest magnitude of the expected value (float32 reassociation)


# -- the ops a program may use: name -> eager implementation(args, params) ------------------------------
def _layer_norm(a, p):
    shape = a[0].shape[-p["ndims"]:]
    return F.layer_norm(a[0], shape, a[1] if len(a) > 1 else None, a[2] if len(a) > 2 else None, eps=1e-5)


OPS = {
    "relu": lambda a, p: torch.relu(a[0]), "sigmoid": lambda a, p: torch.sigmoid(a[0]),
    "tanh": lambda a, p: torch.tanh(a[0]), "exp": lambda a, p: torch.exp(a[0].clamp(max=20)),
    "neg": lambda a, p: -a[0], "abs": lambda a, p: a[0].abs(), "gelu": lambda a, p: F.gelu(a[0]),
    "silu": lambda a, p: F.silu(a[0]), "sqrt_abs": lambda a, p: a[0].abs().sqrt(),
    "hardswish": lambda a, p: F.hardswish(a[0]), "leaky_relu": lambda a, p: F.leaky_relu(a[0], 0.1),
    "scale": lambda a, p: a[0] * p["c"] + p["d"],
    "add": lambda a, p: a[0] + a[1], "sub": lambda a, p: a[0] - a[1], "mul": lambda a, p: a[0] * a[1],
    "div": lambda a, p: a[0] / (a[1].abs() + 0.5), "maximum": lambda a, p: torch.maximum(a[0], a[1]),
    "minimum": lambda a, p: torch.minimum(a[0], a[1]), "where": lambda a, p: torch.where(a[2] > 0, a[0], a[1]),
    "sum": lambda a, p: a[0].sum(p["dims"], keepdim=p["keepdim"]),
    "mean": lambda a, p: a[0].mean(p["dims"], keepdim=p["keepdim"]),
    "amax": lambda a, p: a[0].amax(p["dims"], keepdim=p["keepdim"]),
    "amin": lambda a, p: a[0].amin(p["dims"], keepdim=p["keepdim"]),
    "softmax": lambda a, p: torch.softmax(a[0], p["dim"]),
    "log_softmax": lambda a, p: torch.log_softmax(a[0], p["dim"]),
    "layer_norm": _layer_norm,
    "matmul": lambda a, p: a[0] @ a[1], "linear": lambda a, p: F.linear(a[0], a[1], a[2] if len(a) > 2 else None),
    "conv2d": lambda a, p: F.conv2d(a[0], a[1], a[2] if len(a) > 2 else None, p["stride"], p["padding"],
                                    p["dilation"], p["groups"]),
    "max_pool2d": lambda a, p: F.max_pool2d(a[0], p["k"], p["stride"], p["padding"], ceil_mode=p["ceil"]),
    "avg_pool2d": lambda a, p: F.avg_pool2d(a[0], p["k"], p["stride"], p["padding"], ceil_mode=p["ceil"],
                                            count_include_pad=p["cip"]),
    "adaptive_avg_pool2d": lambda a, p: F.adaptive_avg_pool2d(a[0], p["out"]),
    "reshape": lambda a, p: a[0].reshape(p["shape"]), "permute": lambda a, p: a[0].permute(p["perm"]),
    "transpose": lambda a, p: a[0].transpose(p["d0"], p["d1"]),
    "slice": lambda a, p: a[0][(slice(None),) * p["dim"] + (slice(p["start"], p["stop"], p["step"]),)],
    "cat": lambda a, p: torch.cat(a, p["dim"]), "expand": lambda a, p: a[0].expand(p["shape"]),
    "unsqueeze": lambda a, p: a[0].unsqueeze(p["dim"]), "flatten": lambda a, p: a[0].flatten(p["start"]),
    "contiguous_t": lambda a, p: a[0].transpose(0, -1).contiguous(),
    "floor_divide": lambda a, p: torch.floor_divide(a[0], a[1] if len(a) > 1 else p["c"]),
    "remainder": lambda a, p: torch.remainder(a[0], a[1] if len(a) > 1 else p["c"]),
    "fmod": lambda a, p: torch.fmod(a[0], a[1] if len(a) > 1 else p["c"]),
    "sign": lambda a, p: torch.sign(a[0]), "round": lambda a, p: torch.round(a[0] * 3),
    "clamp": lambda a, p: a[0].clamp(p["lo"], p["hi"]), "pow": lambda a, p: (a[0].abs() + 0.1) ** p["c"],
    "var": lambda a, p: a[0].var(p["dims"], correction=p["correction"], keepdim=p["keepdim"]),
    "index_select": lambda a, p: a[0].index_select(p["dim"], torch.tensor(p["index"], dtype=torch.int64)),
    "flip": lambda a, p: a[0].flip(p["dims"]),
    "pad": lambda a, p: F.pad(a[0], p["pad"], value=p["value"]),
    "squeeze": lambda a, p: a[0].squeeze(p["dim"]),
    "erf": lambda a, p: torch.erf(a[0]),
    "cumsum": lambda a, p: torch.cumsum(a[0], p["dim"]), "cumprod": lambda a, p: torch.cumprod(a[0], p["dim"]),
    "logcumsumexp": lambda a, p: torch.logcumsumexp(a[0], p["dim"]),
    "cummax": lambda a, p: torch.cummax(a[0], p["dim"]).values,
}


# -- generation -------------------------------------------------------------------------------------
class _Gen:
    """Builds a program step by step, running each op eagerly so every step is valid by construction."""

    def __init__(self, rng: random.Random, grad: bool = False):
        self.rng, self.grad = rng, grad
        self.torch_gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
        self.inputs, self.steps, self.values = [], [], []

    def new_input(self, shape):
        shape = [int(s) for s in shape]
        self.inputs.append(shape)
        t = torch.randn(shape, generator=self.torch_gen)
        # inputs are renumbered after steps at the end; store (kind, index)
        self.values.append(("in", len(self.inputs) - 1, t))
        return len(self.values) - 1

    def add_step(self, op, args, params):
        out = OPS[op]([self.values[a][2] for a in args], params)
        if out.numel() > MAX_NUMEL or out.numel() == 0 or out.dim() > 5:
            return None
        self.steps.append({"op": op, "args": list(args), "params": params})
        self.values.append(("step", len(self.steps) - 1, out))
        return len(self.values) - 1

    def pick(self):
        """A recent value, preferring the newest (programs are chains with side branches)."""
        n = len(self.values)
        return n - 1 if self.rng.random() < 0.6 else self.rng.randrange(n)

    def shape(self, v):
        return list(self.values[v][2].shape)

    def broadcast_partner(self, shape, fresh: bool = False):
        """A value that broadcasts with `shape`: sometimes an existing one (never when `fresh`), else a new input."""
        r = self.rng
        for v in range(len(self.values)):   # an existing value with exactly this shape
            if not fresh and self.shape(v) == shape and r.random() < 0.3:
                return v
        s = [1 if r.random() < 0.3 else d for d in shape]
        if s and r.random() < 0.3:
            s = s[r.randrange(len(s) + 1):]
        return self.new_input(s)

    def random_shape(self):
        r = self.rng
        rank = r.choice([0, 1, 2, 2, 3, 3, 4, 4])
        while True:
            s = [r.choice([1, 2, 3, 4, 5, 7, 8, 16]) for _ in range(rank)]
            if math.prod(s) <= 1024:
                return s

    def step(self):
        r = self.rng
        x = self.pick()
        sx = self.shape(x)
        rank = len(sx)
        kind = r.choice(["unary"] * 3 + ["binary"] * 3 + ["reduce", "softmax", "layer_norm", "matmul",
                         "linear", "conv", "pool", "movement", "movement", "movement", "cat", "expand",
                         "discontinuous", "more", "inverted_residual", "scan"])
        if kind == "discontinuous":
            # floor/round-like ops jump at integers: a 1-ulp difference upstream would flip them, so they
            # read fresh inputs (exact in both runs), never computed values
            x = self.new_input(self.random_shape() if r.random() < 0.5 else sx)
            # floor_divide has no derivative
            op = r.choice(([] if self.grad else ["floor_divide"]) + ["remainder", "fmod", "sign", "round"])
            if op in ("sign", "round"):
                return self.add_step(op, [x], {})
            if r.random() < 0.5:
                return self.add_step(op, [x], {"c": r.choice([0.1, 0.7, -0.7, 2.0, -3.0])})
            return self.add_step(op, [x, self.broadcast_partner(self.shape(x), fresh=True)], {})
        if kind == "more":
            op = r.choice(["clamp", "pow", "var", "index_select", "flip", "pad", "squeeze"])
            if op == "clamp":
                lo = round(r.uniform(-1, 0.5), 2)
                return self.add_step(op, [x], {"lo": lo, "hi": r.choice([None, lo + 0.5])})
            if op == "pow":
                return self.add_step(op, [x], {"c": r.choice([0.5, 2.0, 3.0, -1.0, 1.7])})
            if op == "var" and rank:
                dims = sorted(r.sample(range(rank), r.randint(1, rank)))
                return self.add_step(op, [x], {"dims": dims, "correction": r.choice([0, 1]),
                                               "keepdim": r.random() < 0.5})
            if op == "index_select" and rank:
                d = r.randrange(rank)
                return self.add_step(op, [x], {"dim": d, "index": [r.randrange(sx[d]) for _ in range(r.randint(1, 5))]})
            if op == "flip" and rank:
                return self.add_step(op, [x], {"dims": sorted(r.sample(range(rank), r.randint(1, rank)))})
            if op == "pad" and rank:
                n = r.randint(1, min(rank, 3))
                return self.add_step(op, [x], {"pad": [r.randint(0, 2) for _ in range(2 * n)],
                                               "value": r.choice([0.0, 1.5])})
            if op == "squeeze" and rank:
                return self.add_step(op, [x], {"dim": r.randrange(-rank, rank)})
            return None
        if kind == "unary":
            op = r.choice(["relu", "sigmoid", "tanh", "exp", "neg", "abs", "gelu", "silu", "sqrt_abs",
                           "hardswish", "leaky_relu", "scale", "erf"])
            params = {"c": round(r.uniform(-2, 2), 3), "d": round(r.uniform(-1, 1), 3)} if op == "scale" else {}
            return self.add_step(op, [x], params)
        if kind == "binary":
            op = r.choice(["add", "sub", "mul", "div", "maximum", "minimum", "where"])
            y = self.broadcast_partner(sx)
            if r.random() < 0.5:
                x, y = y, x
            args = [x, y] + ([self.new_input(self.shape(x))] if op == "where" else [])
            return self.add_step(op, args, {})
        if kind == "reduce":
            dims = sorted(r.sample(range(rank), r.randint(1, rank))) if rank else [r.choice([0, -1])]
            return self.add_step(r.choice(["sum", "mean", "amax", "amin"]), [x],
                                 {"dims": dims, "keepdim": r.random() < 0.5})
        if kind == "scan":
            op = r.choice(["cumsum", "cumsum", "cumprod", "logcumsumexp", "cummax"])
            return self.add_step(op, [x], {"dim": r.randrange(-rank, rank) if rank else 0})
        if kind == "softmax":
            return self.add_step(r.choice(["softmax", "log_softmax"]), [x], {"dim": r.randrange(-rank, rank)})
        if kind == "layer_norm":
            nd = r.randint(1, min(rank, 2))
            args = [x] + ([self.new_input(sx[-nd:]), self.new_input(sx[-nd:])] if r.random() < 0.6 else [])
            return self.add_step("layer_norm", args, {"ndims": nd})
        if kind == "matmul":
            n = r.choice([1, 3, 8, 16])
            if rank >= 3 and r.random() < 0.5:
                w = self.new_input(sx[:-2] + [sx[-1], n])
            else:
                w = self.new_input([sx[-1], n])
            return self.add_step("matmul", [x, w], {})
        if kind == "linear":
            n = r.choice([1, 4, 8, 12])
            args = [x, self.new_input([n, sx[-1]])] + ([self.new_input([n])] if r.random() < 0.5 else [])
            return self.add_step("linear", args, {})
        if kind == "inverted_residual":
            # MobileNetV2's block: 1x1 conv to 16+ channels, activation, depthwise 3x3, activation, 1x1 conv (the
            # NCHW16c regions of use_blocked_layout, with channel counts off a multiple of 16 too)
            if rank != 4 or sx[1] > 8 or math.prod(sx[2:]) > 100:
                x = self.new_input([1, r.choice([3, 4, 8]), r.randint(3, 10), r.randint(3, 10)])
            m = r.choice([16, 24, 32])
            steps = [("conv2d", m, 1, 1), ("act",), ("conv2d", m, 3, m), ("act",),
                     ("conv2d", r.choice([8, 16, 24]), 1, 1)]
            for st in steps:
                if x is None:
                    return None
                if st[0] == "act":
                    x = self.add_step(r.choice(["relu", "hardswish", "silu", "tanh"]), [x], {})
                    continue
                _, cout, k, groups = st
                c = self.shape(x)[1]
                args = [x, self.new_input([cout, c // groups, k, k])] \
                    + ([self.new_input([cout])] if r.random() < 0.5 else [])
                x = self.add_step("conv2d", args, {"stride": r.choice([1, 2]) if k == 3 else 1, "padding": k // 2,
                                                   "dilation": 1, "groups": groups})
            return x
        if kind == "conv":
            if rank != 4:
                x = self.new_input([r.choice([1, 2]), r.choice([1, 2, 3, 4, 8, 16, 24]), r.randint(3, 12),
                                    r.randint(3, 12)])
                sx = self.shape(x)
            c = sx[1]
            # 16 channels and more, depthwise convs after convs: the NCHW16c regions of use_blocked_layout
            depthwise = c >= 16 and r.random() < 0.5
            groups = c if depthwise else r.choice([g for g in (1, 2, 4, c) if c % g == 0])
            cout = c if depthwise else groups * r.choice([1, 2, 3]) if groups > 1 else r.choice([1, 2, 3, 16, 24])
            k = r.choice([1, 2, 3, 5])
            args = [x, self.new_input([cout, c // groups, k, r.choice([k, 1])])]
            if r.random() < 0.5:
                args.append(self.new_input([cout]))
            params = {"stride": r.choice([1, 1, 2]), "padding": r.choice([0, 1, 2]), "dilation": r.choice([1, 1, 2]),
                      "groups": groups}
            return self.add_step("conv2d", args, params)
        if kind == "pool":
            if rank != 4:
                x = self.new_input([r.choice([1, 2]), r.choice([1, 3, 4]), r.randint(2, 12), r.randint(2, 12)])
            op = r.choice(["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"])
            if op == "adaptive_avg_pool2d":
                return self.add_step(op, [x], {"out": [r.randint(1, 4), r.randint(1, 4)]})
            k = r.choice([1, 2, 3])
            return self.add_step(op, [x], {"k": k, "stride": r.choice([1, 2, k]), "padding": r.randint(0, k // 2),
                                           "ceil": r.random() < 0.3, "cip": r.random() < 0.5})
        if kind == "movement":
            op = r.choice(["reshape", "permute", "transpose", "slice", "unsqueeze", "flatten", "contiguous_t"])
            if op == "reshape":
                n = math.prod(sx)
                shape, rest = [], n
                for _ in range(r.randint(0, 3)):
                    ds = [d for d in range(1, rest + 1) if rest % d == 0]
                    d = r.choice(ds)
                    shape.append(d)
                    rest //= d
                shape.append(rest)
                if r.random() < 0.3:
                    shape[r.randrange(len(shape))] = -1
                return self.add_step(op, [x], {"shape": shape})
            if op == "permute":
                perm = list(range(rank))
                r.shuffle(perm)
                return self.add_step(op, [x], {"perm": perm})
            if op == "transpose":
                return self.add_step(op, [x], {"d0": r.randrange(rank), "d1": r.randrange(-rank, rank)})
            if op == "slice":
                d = r.randrange(rank)
                n = sx[d]
                start = r.randint(-n, n - 1)
                return self.add_step(op, [x], {"dim": d, "start": start, "stop": r.choice([None, r.randint(-n, n)]),
                                               "step": r.choice([1, 1, 2, 3])})
            if op == "unsqueeze":
                return self.add_step(op, [x], {"dim": r.randint(-rank - 1, rank)})
            if op == "flatten":
                return self.add_step(op, [x], {"start": r.randrange(rank)})
            return self.add_step(op, [x], {})
        if kind == "cat":
            d = r.randrange(rank)
            others = []
            for _ in range(r.randint(1, 2)):
                s = list(sx)
                s[d] = r.randint(1, 4)
                others.append(x if r.random() < 0.2 else self.new_input(s))
            return self.add_step("cat", [x] + others, {"dim": d - rank if r.random() < 0.3 else d})
        if kind == "expand":
            ones = [i for i, d in enumerate(sx) if d == 1]
            shape = [r.randint(1, 4) if i in ones else d for i, d in enumerate(sx)]
            if r.random() < 0.3:
                shape = [r.randint(1, 3)] + shape
            return self.add_step("expand", [x], {"shape": shape})
        return None

    def program(self, seed: int, n_steps: int) -> dict:
        self.new_input(self.random_shape())
        tries = 0
        while len(self.steps) < n_steps and tries < 20 * n_steps:
            tries += 1
            try:
                self.step()
            except (RuntimeError, ValueError, IndexError):
                continue   # eager rejects this combination: draw another
        outs = [len(self.values) - 1]
        if len(self.values) > 2 and self.rng.random() < 0.4:
            outs.append(self.rng.randrange(len(self.values) - 1))
        return _renumber(seed, self.inputs, self.values, self.steps, outs)


def _renumber(seed, inputs, values, steps, outs) -> dict:
    """Values as refs: inputs first (0..n_in-1), then one per step."""
    n_in = len(inputs)
    ref = [v[1] if v[0] == "in" else n_in + v[1] for v in values]
    steps = [dict(s, args=[ref[a] for a in s["args"]]) for s in steps]
    return {"seed": seed, "inputs": inputs, "steps": steps, "outputs": sorted(set(ref[o] for o in outs))}


def generate(seed: int, n_steps: int | None = None, grad: bool = False) -> dict:
    """A random program (plain JSON) from `seed`; `grad`: also compare gradients (backward graphs)."""
    rng = random.Random(seed)
    p = _Gen(rng, grad).program(seed, n_steps or rng.randint(1, 8))
    return dict(p, grad=True) if grad else p


# -- running and checking ---------------------------------------------------------------------------
def make_fn(program: dict):
    """The program as a python function of its input tensors (what torch.compile traces)."""
    steps, outputs = program["steps"], program["outputs"]

    def fn(*inputs):
        vals = list(inputs)
        for s in steps:
            vals.append(OPS[s["op"]]([vals[a] for a in s["args"]], s["params"]))
        return tuple(vals[o] for o in outputs)
    return fn


def make_inputs(program: dict) -> list:
    g = torch.Generator().manual_seed(program["seed"])
    return [torch.randn(s, generator=g) for s in program["inputs"]]


def check(program: dict, target: str = "llvm") -> str | None:
    """Compile and compare; None when correct and compiled, else a one-line description: 'wrong: ...', 'crashed:
    ...' or 'uncompiled: ...' (a subgraph fxc could not compile ran in eager PyTorch: right, but a failure)."""
    return _compare_fn(make_fn(program), make_inputs(program), target, program.get("grad", False),
                       program.get("dynamic", False))


def check_batch(programs: list, target: str = "llvm") -> list:
    """Check several programs compiled together as one function (one trace, one build: faster); a batch
    with any failure is re-checked program by program. Returns one result per program (see `check`)."""
    if len(programs) == 1:
        return [check(programs[0], target)]
    fns = [make_fn(p) for p in programs]
    counts = [len(p["inputs"]) for p in programs]

    def fn(*inputs):
        outs, k = [], 0
        for f, n in zip(fns, counts):
            outs += list(f(*inputs[k:k + n]))
            k += n
        return tuple(outs)
    inputs = [t for p in programs for t in make_inputs(p)]
    ok = _compare_fn(fn, inputs, target, any(p.get("grad") for p in programs),
                     any(p.get("dynamic") for p in programs)) is None
    return [None] * len(programs) if ok else [check(p, target) for p in programs]


def _with_grads(fn, inputs):
    """Outputs, then the gradients of a fixed random weighting of the outputs w.r.t. every input."""
    ins = [t.clone().requires_grad_(True) for t in inputs]
    outs = fn(*ins)
    g = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=g)).sum() for o in outs)
    grads = torch.autograd.grad(loss, ins, allow_unused=True)
    return tuple(o.detach() for o in outs) + tuple(torch.zeros_like(i) if d is None else d for d, i in zip(grads, ins))


def _compare_fn(fn, inputs, target, grad=False, dynamic=False):
    """dynamic: compiled with dynamic=True (symbolic sizes), and run again with every input's leading dim 2n + 1
    where eager accepts that."""
    import contextlib

    import torch._dynamo  # deferred: torch._dynamo is slow to import
    run = _with_grads if grad else (lambda f, ins: f(*[t.clone() for t in ins]))
    longer = [torch.cat([t, t, t[:1]]) if t.ndim else t for t in inputs] if dynamic else None
    with contextlib.nullcontext() if grad else torch.no_grad():
        expected = run(fn, inputs)
        torch._dynamo.reset()
        try:
            with recording() as rec:
                compiled = torch.compile(fn, backend="fxc", dynamic=dynamic, options={"target": target})
                actual = run(compiled, inputs)
                if longer is not None:
                    try:
                        expected2 = run(fn, longer)
                    except Exception:       # noqa: BLE001  (a program whose sizes do not stretch)
                        longer = None
                    else:
                        actual2 = run(compiled, longer)
        except Exception as e:
            return f"crashed: {type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        finally:
            torch._dynamo.reset()
    wrong = _compare_outputs(fn, inputs, run, grad, actual, expected)
    if wrong is None and longer is not None:
        wrong = _compare_outputs(fn, longer, run, grad, actual2, expected2)
        wrong = wrong and wrong.replace("wrong: ", "wrong (leading dims 2n+1): ", 1)
    if wrong is not None:
        return wrong
    if rec.failures:            # right (that part ran in eager PyTorch), but fxc could not compile it
        return "uncompiled: subgraph " + " ".join(str(rec.failures[0]).split())[:300]
    return None


def _compare_outputs(fn, inputs, run, grad, actual, expected):
    """None when every output is close to eager's (or closer to the float64 result), else 'wrong: ...'."""
    reference = None
    for k, (a, e) in enumerate(zip(actual, expected)):
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"wrong: output {k} is {a.dtype}{list(a.shape)}, eager gives {e.dtype}{list(e.shape)}"
        finite = e[torch.isfinite(e)] if e.is_floating_point() else e.new_zeros(0)
        scale = max(finite.abs().max().item(), 1.0) if finite.numel() else 1.0
        try:
            torch.testing.assert_close(a, e, rtol=RTOL, atol=ATOL * scale, equal_nan=True)
        except AssertionError as err:
            if a.is_floating_point():
                if reference is None:
                    reference = _float64_reference(fn, inputs, run, grad)
                if reference is not None and closer_than_eager(a, e, reference[k], ATOL * scale):
                    continue
            return f"wrong: output {k}: " + " ".join(str(err).split())[:300]
    return None


def _float64_reference(fn, inputs, run, grad):
    """The same program in float64 (None when it cannot run so): the judge when fxc and eager float32 differ."""
    import contextlib
    try:
        with contextlib.nullcontext() if grad else torch.no_grad():
            return run(fn, [t.double() if t.is_floating_point() else t for t in inputs])
    except Exception:       # noqa: BLE001 - an op without a float64 kernel: no judge
        return None


def closer_than_eager(actual, expected, reference, floor: float = 0.0) -> bool:
    """A float32 result `actual` that differs from eager's `expected` is only rounding when it is as close to
    the float64 `reference`: same non-finite pattern, and fxc's largest error against float64 within 2x
    eager's (which must exceed `floor`)."""
    ref = reference.double()
    if not torch.equal(torch.isfinite(actual), torch.isfinite(expected)):
        return False
    both = torch.isfinite(ref) & torch.isfinite(expected)
    if not both.any():
        return False
    err_fxc = (actual.double() - ref)[both].abs().max().item()
    err_eager = (expected.double() - ref)[both].abs().max().item()
    return err_eager > floor and err_fxc <= 2 * err_eager


def _prune(program: dict) -> dict:
    """Drop steps no output depends on and inputs no step uses (refs renumbered)."""
    n_in = len(program["inputs"])
    live = set(program["outputs"])
    for i in range(len(program["steps"]) - 1, -1, -1):
        if n_in + i in live:
            live.update(program["steps"][i]["args"])
    keep_in = [i for i in range(n_in) if i in live]
    keep_steps = [i for i in range(len(program["steps"])) if n_in + i in live]
    new = {old: k for k, old in enumerate(keep_in)}
    new.update({n_in + old: len(keep_in) + k for k, old in enumerate(keep_steps)})
    steps = [dict(program["steps"][i], args=[new[a] for a in program["steps"][i]["args"]]) for i in keep_steps]
    return dict(program, inputs=[program["inputs"][i] for i in keep_in], steps=steps,
                outputs=[new[o] for o in program["outputs"]])


def _cut(program: dict, i: int) -> dict:
    """Replace step i by a fresh input of the same shape (everything after it stays valid)."""
    fn_vals = _eager_values(program)
    n_in = len(program["inputs"])
    inputs = program["inputs"] + [list(fn_vals[n_in + i].shape)]
    new_ref = len(inputs) - 1
    # refs: old inputs keep their numbers; steps shift by one; step i becomes the new input
    def m(a):
        if a < n_in:
            return a
        if a == n_in + i:
            return new_ref
        return a + 1 if a < n_in + i else a
    steps = [dict(s, args=[m(a) for a in s["args"]]) for k, s in enumerate(program["steps"]) if k != i]
    # after removing step i, steps j>i move down by one position: ref n_in+j -> n_in+1+j-1 = n_in+j
    return _prune(dict(program, inputs=inputs, steps=steps, outputs=[m(o) for o in program["outputs"]]))


def _eager_values(program: dict) -> list:
    vals = make_inputs(program)
    with torch.no_grad():
        for s in program["steps"]:
            vals.append(OPS[s["op"]]([vals[a] for a in s["args"]], s["params"]))
    return vals


def shrink(program: dict, failure: str, target: str = "llvm") -> dict:
    """Greedily make a failing program smaller while it still fails the same way (wrong/crashed)."""
    how = failure.split(":")[0]

    def still_fails(p):
        try:
            f = check(p, target)
        except Exception:
            return False
        return f is not None and f.split(":")[0] == how
    program = _prune(program)
    changed = True
    while changed:
        changed = False
        if len(program["outputs"]) > 1:
            for o in program["outputs"]:
                cand = _prune(dict(program, outputs=[o]))
                if still_fails(cand):
                    program, changed = cand, True
                    break
        for i in range(len(program["steps"])):
            cand = _cut(program, i)
            if cand["steps"] and still_fails(cand):
                program, changed = cand, True
                break
    return program


def save_reproducer(program: dict, failure: str, save_dir) -> Path:
    body = json.dumps(program, sort_keys=True)
    name = "fuzz_" + hashlib.sha256(body.encode()).hexdigest()[:12] + ".json"
    path = Path(save_dir) / name
    atomic_write(path, json.dumps({"failure": failure, "program": program}, indent=1, sort_keys=True).encode())
    return path


def run(count: int, seed: int, target: str = "llvm", save_dir=None, progress=print, max_seconds=None,
        batch: int = 8, grad: bool = False, dynamic: bool = False) -> dict:
    """Fuzz `count` programs (seeds seed..seed+count-1), `batch` per compiled function; failing ones are
    shrunk and saved. The case being checked is kept in `<save_dir>/.fuzz_current-<seed>.json`."""
    import logging
    logging.getLogger("fxc").setLevel(logging.ERROR)
    stats = {"graphs": 0, "wrong": 0, "crashed": 0, "uncompiled": 0, "failures": []}
    t0 = time.perf_counter()
    next_report = 50
    for k0 in range(0, count, batch):
        seeds = list(range(seed + k0, seed + min(k0 + batch, count)))
        programs = [generate(s, grad=grad) for s in seeds]
        for program in programs:
            if dynamic:
                program["dynamic"] = True
        if save_dir:
            atomic_write(Path(save_dir) / f".fuzz_current-{seed}.json",
                         json.dumps({"program": programs[0], "batch": programs}).encode())
        results = check_batch(programs, target)
        stats["graphs"] += len(programs)
        for s, program, failure in zip(seeds, programs, results):
            if not failure:
                continue
            stats[failure.split(":")[0]] += 1
            small = shrink(program, failure, target)
            f2 = check(small, target) or failure
            path = save_reproducer(small, f2, save_dir) if save_dir else None
            stats["failures"].append({"seed": s, "failure": f2, "reproducer": str(path) if path else small})
            progress(f"seed {s}: {f2}\n  shrunk to {len(small['steps'])} steps"
                     + (f", saved {path}" if path else f": {json.dumps(small)}"))
        if stats["graphs"] >= next_report or stats["graphs"] == count:
            next_report += 50
            el = time.perf_counter() - t0
            progress(f"[{stats['graphs']}/{count}] {stats['wrong']} wrong, {stats['crashed']} crashed, "
                     f"{stats['uncompiled']} uncompiled "
                     f"({el / stats['graphs']:.2f} s/graph)")
        if max_seconds and time.perf_counter() - t0 > max_seconds:
            break
    if save_dir:
        (Path(save_dir) / f".fuzz_current-{seed}.json").unlink(missing_ok=True)
    return stats


def run_jobs(jobs: int, count: int, seed: int, argv: list, progress=print) -> dict:
    """`run` split into `jobs` shards of consecutive seeds, each in its own process with one kernel thread
    (a shard that dies, e.g. on a segfault, counts as one crash; its case stays in .fuzz_current-<seed>.json)."""
    import os
    import subprocess
    import threading
    stats = {"graphs": 0, "wrong": 0, "crashed": 0, "uncompiled": 0, "failures": []}
    lock = threading.Lock()
    bounds = [count * j // jobs for j in range(jobs + 1)]

    def shard(j):
        n, s0 = bounds[j + 1] - bounds[j], seed + bounds[j]
        cmd = [sys.executable, "-m", "fxc.testing.fuzz", "--count", str(n), "--seed", str(s0), "--shard"] + argv
        env = dict(os.environ, FXC_NUM_THREADS="1", OMP_NUM_THREADS="1")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        result = None
        for line in p.stdout:
            if line.startswith("STATS "):
                result = json.loads(line[6:])
            else:
                progress(f"[job {j} seeds {s0}..{s0 + n - 1}] {line.rstrip()}")
        rc = p.wait()
        with lock:
            if result is None:
                result = {"graphs": 0, "wrong": 0, "crashed": 1, "uncompiled": 0,
                          "failures": [{"seed": s0, "failure": f"crashed: the shard exited with code {rc}"}]}
            for k in ("graphs", "wrong", "crashed", "uncompiled"):
                stats[k] += result[k]
            stats["failures"] += result["failures"]

    threads = [threading.Thread(target=shard, args=(j,)) for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fxc.testing.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="llvm")
    p.add_argument("--save-dir", default="tests/regressions", help="where shrunk reproducers go ('' : nowhere)")
    p.add_argument("--max-seconds", type=float, help="stop after this long")
    p.add_argument("--batch", type=int, default=8, help="programs compiled together per function (1: one each)")
    p.add_argument("--grad", action="store_true", help="also compare gradients (compiles the backward graphs)")
    p.add_argument("--dynamic", action="store_true",
                   help="compile with dynamic=True (symbolic sizes) and also run at leading dims 2n+1")
    p.add_argument("--replay", help="check one saved reproducer (or .fuzz_current-*.json) and print the result")
    p.add_argument("--jobs", type=int, default=1, help="shards of the seeds in parallel processes (one thread each)")
    p.add_argument("--shard", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.replay:
        program = json.loads(Path(a.replay).read_text())["program"]
        r = check(program, a.target)
        print(r or "correct")
        return 1 if r else 0
    out = lambda m: print(m, flush=True)
    if a.jobs > 1:
        rest = ["--target", a.target, "--save-dir", a.save_dir, "--batch", str(a.batch)]
        rest += (["--max-seconds", str(a.max_seconds)] if a.max_seconds else []) + (["--grad"] if a.grad else [])
        rest += ["--dynamic"] if a.dynamic else []
        stats = run_jobs(a.jobs, a.count, a.seed, rest, progress=out)
    else:
        stats = run(a.count, a.seed, a.target, a.save_dir or None, progress=out,
                    max_seconds=a.max_seconds, batch=a.batch, grad=a.grad, dynamic=a.dynamic)
        if a.shard:                                     # a shard of run_jobs: hand the stats back
            print("STATS " + json.dumps(stats), flush=True)
    print(f"{stats['graphs']} graphs: {stats['wrong']} wrong, {stats['crashed']} crashed, "
          f"{stats['uncompiled']} uncompiled")
    return 1 if stats["wrong"] or stats["crashed"] or stats["uncompiled"] else 0


if __name__ == "__main__":
    sys.exit(main())
