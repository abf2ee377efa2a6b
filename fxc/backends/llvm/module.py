"""The module level of the LLVM renderer: one LLVM module for a target (triple, data layout, CPU features), its
declarations and loop metadata, the kernels (each written by render.FunctionWriter) and the `fxc_run` entry
that runs the execution plan (symbolic workspace slots computed from the symbol header at call time)."""
from __future__ import annotations

from ...lowering.loop_ir import Kernel
from ...target import Caps
from .render import FunctionWriter


class ModuleWriter:
    """One LLVM module being written for a target: its triple, data layout and capabilities (`caps`: fma,
    bf16_dot, scalef, cvtt choose instructions; libm False (wasm): scalar float32 math by fxc's own code)."""

    def __init__(self, triple: str, datalayout: str, caps: Caps):
        self.triple, self.datalayout, self.caps = triple, datalayout, caps
        self.libm = caps.libm
        self.functions: list = []
        self.decls: dict = {}
        self.md: list = ["!0 = !{}"]
        self.loop_mds: dict = {}
        self._n = 0

    def counter(self) -> int:
        self._n += 1
        return self._n

    def declare(self, fn: str, ret: str, args: list, decls: dict | None = None):
        (self.decls if decls is None else decls).setdefault(fn, f"declare {ret} @{fn}({', '.join(args)})")

    def loop_md(self, kind: str):
        """Loop metadata. Vector work is explicit in the loop IR, so LLVM's loop vectorizer and unroller
        only see the loops that ask for them (kind vectorize / unroll); every other loop keeps its
        shape, which also keeps optimisation time proportional to the code we emit."""
        props = {"unroll": ['!{!"llvm.loop.unroll.full"}'],
                 "vectorize": ['!{!"llvm.loop.unroll.disable"}']}.get(
            kind, ['!{!"llvm.loop.unroll.disable"}', '!{!"llvm.loop.vectorize.enable", i1 false}'])
        key = tuple(props)
        if key in self.loop_mds:
            ids = self.loop_mds[key]
        else:
            ids = []
            for p in props:
                k = len(self.md)
                self.md.append(f"!{k} = {p}")
                ids.append(f"!{k}")
            self.loop_mds[key] = ids
        k = len(self.md)
        self.md.append(f"!{k} = distinct !{{!{k}, {', '.join(ids)}}}")
        return f"!{k}"

    def kernel(self, k: Kernel):
        w = FunctionWriter(self, k.name, k.params, "%args")
        w.load_params("%args")
        w.stmt(k.body)
        self.functions.append(w.finish(f"define internal void @{k.name}(ptr noalias %args) nounwind noinline"))

    def entry(self, calls: list, name: str = "fxc_run", profile: dict | None = None):
        """calls: list of (kernel name, [(slot kind, index or byte offset)]). Slot kinds: in, out, const, work,
        null (an optional input left out).
        profile: kernel name -> counter index; each call then adds its nanoseconds and 1 to the exported
        `fxc_profile_counters` (pairs of i64: total ns, calls)."""
        lines = ["entry:"]
        n = 0
        for kname, slots in calls:
            n += 1
            if profile is not None:
                lines.append(f"  %t0_{n} = call i64 @fxc_profile_now()")
            lines.append(f"  %a{n} = alloca ptr, i64 {max(len(slots), 1)}")
            for j, (kind, ix) in enumerate(slots):
                if kind == "null":          # an optional input left out (fxc/lowering/optional.py)
                    lines.append(f"  %d{n}_{j} = getelementptr ptr, ptr %a{n}, i64 {j}")
                    lines.append(f"  store ptr null, ptr %d{n}_{j}")
                    continue
                if kind == "work" and isinstance(ix, tuple):     # base + symbol x per unit (a symbolic size)
                    base, terms = (ix[0], ((ix[2], (ix[1],)),)) if len(ix) == 3 else ix
                    acc = str(base)     # base + sum of coefficient x product of symbols (the driver's symbolic_slots)
                    for t, (c, headers) in enumerate(terms):
                        prod = str(c)
                        for u, h in enumerate(headers):
                            r = f"%v{n}_{j}_{t}_{u}"
                            lines += [f"  %h{n}_{j}_{t}_{u} = getelementptr i8, ptr %work, i64 {h}",
                                      f"  {r} = load i64, ptr %h{n}_{j}_{t}_{u}",
                                      f"  %m{n}_{j}_{t}_{u} = mul i64 {r}, {prod}"]
                            prod = f"%m{n}_{j}_{t}_{u}"
                        lines.append(f"  %o{n}_{j}_{t} = add i64 {prod}, {acc}")
                        acc = f"%o{n}_{j}_{t}"
                    lines.append(f"  %s{n}_{j} = getelementptr i8, ptr %work, i64 {acc}")
                elif kind == "work":
                    lines.append(f"  %s{n}_{j} = getelementptr i8, ptr %work, i64 {ix}")
                else:
                    src = {"in": "%inputs", "out": "%outputs", "const": "%consts"}[kind]
                    lines.append(f"  %g{n}_{j} = getelementptr ptr, ptr {src}, i64 {ix}")
                    lines.append(f"  %s{n}_{j} = load ptr, ptr %g{n}_{j}")
                lines.append(f"  %d{n}_{j} = getelementptr ptr, ptr %a{n}, i64 {j}")
                lines.append(f"  store ptr %s{n}_{j}, ptr %d{n}_{j}")
            lines.append(f"  call void @{kname}(ptr %a{n})")
            if profile is not None:
                c = profile[kname]
                lines += [f"  %t1_{n} = call i64 @fxc_profile_now()", f"  %dt{n} = sub i64 %t1_{n}, %t0_{n}",
                          f"  %pc{n} = getelementptr i64, ptr @fxc_profile_counters, i64 {2 * c}",
                          f"  %pn{n} = getelementptr i64, ptr @fxc_profile_counters, i64 {2 * c + 1}",
                          f"  atomicrmw add ptr %pc{n}, i64 %dt{n} monotonic",
                          f"  atomicrmw add ptr %pn{n}, i64 1 monotonic"]
        lines += ["  %dz = atomicrmw xchg ptr @fxc_div_by_zero, i32 0 monotonic",     # DIV_BY_ZERO (2) when set
                  "  %ie = atomicrmw xchg ptr @fxc_index_flag, i32 0 monotonic",      # INDEX_OUT_OF_RANGE (4)
                  "  %dz2 = shl i32 %dz, 1", "  %ie4 = shl i32 %ie, 2", "  %rc = or i32 %dz2, %ie4", "  ret i32 %rc"]
        self.functions.append(f"define i32 @{name}(ptr %inputs, ptr %outputs, ptr %consts, ptr %work) {{\n"
                              + "\n".join(lines) + "\n}\n")

    def profile_counters(self, n: int):
        """Export `fxc_profile_counters` ([2n x i64], weak: every split part may define it, the linker keeps one)."""
        self.declare("fxc_profile_now", "i64", [])
        self.decls["@fxc_profile_counters"] = (f"@fxc_profile_counters = weak global [{2 * n} x i64] zeroinitializer, "
                                               "align 64")

    def text(self, functions: list | None = None, md: list | None = None) -> str:
        """The module's text: its declarations, the functions and the metadata (all, or the given ones)."""
        decls = dict(self.decls)        # a copy: a text of some functions leaves the module's order as it is
        self.declare("fxc_parallel_for", "void", ["ptr", "ptr", "i64"], decls)
        # weak: every split part defines it, the linker keeps one per library
        decls["@fxc_div_by_zero"] = "@fxc_div_by_zero = weak global i32 0, align 4"
        decls["@fxc_index_flag"] = "@fxc_index_flag = weak global i32 0, align 4"
        decls["@fxc_index_error"] = "@fxc_index_error = weak global [3 x i64] zeroinitializer, align 8"
        head = [f'target triple = "{self.triple}"', f'target datalayout = "{self.datalayout}"', ""]
        fns = self.functions if functions is None else functions
        return "\n".join(head + list(decls.values()) + [""] + fns + (self.md if md is None else md)) + "\n"
