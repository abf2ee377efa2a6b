"""Row blocks: one kernel for a fused group whose tensors have a symbolic number of rows.

Takes a group (fxc/relay_like/passes/fuse_ops.Group) whose symbolic tensors all have one symbol `s` in their leading
non-unit dim (`[s, 64]`, `[1, 4*s, 768]`: "rows") and static dims after it, and whose every read of such a tensor
is of the row its output element is in (checked on the tensor expressions). Such a group is the same computation
on each row: its kernel runs the group's static schedule (the register tiles, vector loops, parallel splits of the
static build) on blocks of ROW_BLOCK rows, then on the remaining rows one at a time, over the number of rows
given at call time:

    for b in 0 .. s // T:          body_T with every row buffer's index shifted by b*T rows
    for r in 0 .. s % T:           body_1 shifted by (s//T*T + r) rows

(groups of short rows, a sequence's tokens, first run blocks of WIDE_BLOCK rows, then of 16, then of T over the rest:
the sizes are chosen at run time by the row count).

The symbol's value is the first load of `syms`, an int64 buffer parameter after the inputs (the build points it
at the workspace's symbol header). Produces a loop-IR Kernel like `lower_group`'s.
"""
from __future__ import annotations

from ..errors import LoweringError
from . import te
from .expr import Expr, Load, Present, Var, VecLoad, as_expr, rebuild, walk
from .loop_ir import Buffer, For, IfThen, Kernel, LetStmt, Store, map_body, seq, walk_stmts
from .sym import monomial, symbols_of

ROW_BLOCK = 8          # rows of the main blocks (their static schedule is the build's for ROW_BLOCK rows)
WIDE_BLOCK = 64        # ... and before them, blocks of this many rows for groups of short rows (a sequence's
WIDE_ROW_ELEMS = 8192  # tokens of <= WIDE_ROW_ELEMS elements: a GEMM over 64 rows reuses its weights 8x as long)
WIDE_SIZES = (WIDE_BLOCK, 16, ROW_BLOCK, 1)   # the block sizes of such groups, largest first (16: a short sequence's
                                              # tokens in one GEMM, BERT at 16 tokens 1245 -> 1134 us of kernels)


def row_symbols(rows) -> tuple:
    """The rows' monomial as a sorted tuple of symbols: a Sym (one symbol) or a tuple of them (b * s)."""
    return tuple(sorted(rows if isinstance(rows, (tuple, list)) else (rows,), key=repr))


def _leading_run(shape):
    """(axes of the leading symbolic dims, the product's symbols, coefficient, first static axis after them): the
    dims up to the last symbolic one, skipping unit dims, each a multiple of a product of symbols; None otherwise
    (or when the shape is static)."""
    last = max((k for k, d in enumerate(shape) if symbols_of(d)), default=None)
    if last is None:
        return None
    axes, syms, coef = [], (), 1
    for k, d in enumerate(shape[:last + 1]):
        if not symbols_of(d) and d == 1:
            continue
        mono = monomial(d)
        if mono is None or not mono[0]:
            return None
        axes.append(k)
        syms, coef = syms + mono[0], coef * mono[1]
    return tuple(axes), tuple(sorted(syms, key=repr)), coef, last + 1


def row_layout(shape, rows) -> tuple | None:
    """(axes of the rows, elements per row) when `shape` is [1, ..., c*b, s, static...] whose leading symbolic dims
    multiply to c times the rows' monomial `rows` (a Sym, or a tuple of them: batch x sequence); None when the
    shape is static; LoweringError otherwise (a symbolic dim after a static one, another product of symbols)."""
    syms = set().union(*(symbols_of(d) for d in shape))
    if not syms:
        return None
    run = _leading_run(shape)
    if run is None or run[1] != row_symbols(rows):
        raise LoweringError(f"shape {list(shape)}: not rows of {' * '.join(map(repr, row_symbols(rows)))} "
                            f"(symbolic dims that are not the leading ones)")
    per = run[2]
    for x in shape[run[3]:]:
        per *= x
    return run[0], per


def group_rows(gr) -> tuple:
    """The rows' symbols of a group: the product of the leading symbolic dims, the same for every symbolic tensor
    of the group ([b, s, 64] and [b*s, 64]: (b, s)); LoweringError when they differ or a symbol repeats."""
    found = set()
    for v in list(gr.inputs) + [o for n in gr.nodes for o in n.outputs]:
        if any(symbols_of(d) for d in v.shape):
            run = _leading_run(v.shape)
            if run is None:
                raise LoweringError(f"shape {list(v.shape)}: symbolic dims that are not the leading ones")
            found.add(run[1])
    if len(found) != 1:
        raise LoweringError(f"a group over several products of symbols ({sorted(map(repr, found))})")
    rows = found.pop()
    if len(set(rows)) != len(rows) or len(rows) > 3:
        raise LoweringError(f"rows of {rows!r}: a repeated symbol (or more than three)")
    return rows


def rows_env(rows: tuple, size: int) -> dict:
    """Symbol sizes at which the rows' product is `size`: the last symbol takes it, the others are 1."""
    return {**{x.name: 1 for x in rows[:-1]}, rows[-1].name: size}


def check_env(rows: tuple) -> dict:
    """Symbol sizes for check_rows: every symbol > 1 (a unit dim could hide which row a read is of), product
    ROW_BLOCK."""
    return {**{x.name: 2 for x in rows[:-1]}, rows[-1].name: max(2, ROW_BLOCK >> (len(rows) - 1))}


def group_symbols(gr) -> list:
    """The size symbols of a group's types, in name order."""
    syms = set()
    for v in list(gr.inputs) + [o for n in gr.nodes for o in n.outputs]:
        for d in v.shape:
            syms |= symbols_of(d)
    return sorted(syms, key=repr)


def group_symbol(gr):
    """The one symbol of a group's types, or None when they are static (LoweringError for several)."""
    syms = set()
    for v in list(gr.inputs) + [o for n in gr.nodes for o in n.outputs]:
        for d in v.shape:
            syms |= symbols_of(d)
    if len(syms) > 1:
        raise LoweringError(f"a group with several size symbols ({', '.join(sorted(map(repr, syms)))})")
    return next(iter(syms), None)


def check_rows(gr, sym, tensors: dict) -> None:
    """LoweringError unless every node of the group reads the symbolic tensors only at its own output row.
    sym: the rows' symbol (or tuple of symbols); tensors: Value id -> te.Tensor, the group's tensor expressions at
    some static size (every symbol > 1: check_env)."""
    for v in list(gr.inputs) + [o for n in gr.nodes for o in n.outputs]:
        row_layout(v.shape, sym)
    for n in gr.nodes:
        outs = tensors[n.outputs[0].id]
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        ins = {id(tensors[v.id]): v for v in n.inputs if row_layout(v.shape, sym) is not None}
        for o, t in zip(n.outputs, [tensors[o.id] for o in n.outputs]):
            lay = row_layout(o.shape, sym)
            if t.extern is not None:
                if ins and not _rowwise_extern(n, sym):
                    raise LoweringError(f"{n.op}: loop IR written whole over symbolic rows")
                continue
            if t.body is not None and lay is not None:      # a static tensor read at a row-dependent index (a
                fixed = {id(tensors[v.id]) for v in n.inputs if row_layout(v.shape, sym) is None}  # slice [:s] of
                row_vars = [t.axes[a] for a in lay[0]]                                              # a table)
                for x in walk(t.body):
                    if isinstance(x, te.TRef) and id(x.tensor) in fixed \
                            and any(y is r for i in x.indices for y in walk(as_expr(i)) for r in row_vars):
                        raise LoweringError(f"{n.op}: reads a static tensor at its row (not the same on each row)")
            if t.body is None or not ins:
                continue
            if n.op == "reshape":           # rows stay rows when the elements per row are the same
                src = n.inputs[0]
                if lay is None or row_layout(src.shape, sym)[1] != lay[1]:
                    raise LoweringError(f"reshape {list(src.shape)} -> {list(o.shape)} moves rows")
                continue
            if lay is None:
                raise LoweringError(f"{n.op}: a static result from symbolic rows (a reduction over them)")
            for x in walk(t.body):
                if isinstance(x, te.TRef) and id(x.tensor) in ins:
                    v = ins[id(x.tensor)]
                    axes = row_layout(v.shape, sym)[0]
                    if len(axes) != len(lay[0]) or any(x.indices[a] is not t.axes[b] or v.shape[a] is not o.shape[b]
                                                       for a, b in zip(axes, lay[0])):
                        raise LoweringError(f"{n.op}: reads {list(v.shape)} at another row than it writes "
                                            f"({list(o.shape)})")


# ops written whole as loop IR (te.extern) that treat each slice of their leading axes on its own: rows stay rows
# when the rows' axes are not the op's `dim` attribute ("dim", attribute name), or lie before the op's core trailing
# axes ("trailing", their count or the attribute holding it)
ROWWISE_EXTERNS = {"softmax": ("dim", "dim"), "log_softmax": ("dim", "dim"), "cumsum": ("dim", "dim"),
                   "cumprod": ("dim", "dim"), "cummax": ("dim", "dim"), "cummin": ("dim", "dim"),
                   "max_pool2d": ("trailing", 2), "layer_norm": ("trailing", "ndims")}


def _rowwise_extern(n, sym) -> bool:
    rule = ROWWISE_EXTERNS.get(n.op)
    if rule is None:
        return False
    kind, what = rule
    lays = [(v, row_layout(v.shape, sym)) for v in list(n.inputs) + list(n.outputs)]
    lays = [(v, lay) for v, lay in lays if lay is not None]
    axes, v0 = lays[0][1][0], lays[0][0]
    if any(lay[0] != axes or any(v.shape[a] is not v0.shape[a] for a in axes) for v, lay in lays) \
            or any(row_layout(o.shape, sym) is None for o in n.outputs):
        return False
    if kind == "dim":
        return all(n.attrs[what] % v.type.ndim not in axes for v, _ in lays)
    trailing = what if isinstance(what, int) else n.attrs[what]
    return all(max(axes) < v.type.ndim - trailing for v, _ in lays)


def shift_stmt(s, offsets: dict):
    """s with every access of a buffer in `offsets` (Buffer -> int64 Expr) moved by that many elements."""
    memo: dict = {}

    def ex(x: Expr) -> Expr:
        r = memo.get(x)
        if r is not None:
            return r
        args = tuple(ex(a) if isinstance(a, Expr) else a for a in x.args)
        if isinstance(x, (Load, VecLoad)) and x.args[0] in offsets:
            args = (args[0], args[1] + offsets[x.args[0]]) + args[2:]
            r = type(x)(*args)
        elif isinstance(x, (Var, Present)) or not any(isinstance(a, Expr) for a in x.args):
            r = x
        else:
            r = x if all(a is b for a, b in zip(args, x.args)) else rebuild(x, args)
        memo[x] = r
        return r

    def st(s):
        if isinstance(s, Store):
            idx = ex(s.index)
            return Store(s.buf, idx + offsets[s.buf] if s.buf in offsets else idx, ex(s.value))
        if isinstance(s, LetStmt):
            return LetStmt(s.var, ex(s.value), st(s.body))
        if isinstance(s, IfThen):
            return IfThen(ex(s.cond), st(s.then), None if s.orelse is None else st(s.orelse))
        return map_body(s, st)

    return st(s)


def _has_parallel(s) -> bool:
    return any(isinstance(x, For) and x.kind == "parallel" for x in walk_stmts(s))


def lower_rows(gr, name: str, tensors_at, num_threads: int, caps, sym_index: dict) -> Kernel:
    """The row-block kernel of group gr (see the module's docstring). tensors_at(env) -> (roots, input
    placeholders by input position, {Value id: te.Tensor}) at the symbol sizes env ({name: int});
    sym_index: symbol name -> its slot in `syms`. LoweringError when the group is not rows."""
    from .lower import lower_group
    rows = group_rows(gr)
    outs = [Buffer(f"out{k}", o.dtype, 1) for k, o in enumerate(gr.outputs)]
    ins = [Buffer(f"in{k}", v.dtype, 1) for k, v in enumerate(gr.inputs)]
    syms = Buffer("syms", "int64", 8)
    per = {b: row_layout(v.shape, rows) for b, v in zip(outs + ins, list(gr.outputs) + list(gr.inputs))}
    per = {b: lay[1] for b, lay in per.items() if lay is not None}
    check_rows(gr, rows, tensors_at(check_env(rows))[2])
    wide = max(row_layout(o.shape, rows)[1] for o in gr.outputs if row_layout(o.shape, rows)) <= WIDE_ROW_ELEMS
    sizes = WIDE_SIZES if wide else (ROW_BLOCK, 1)
    bodies, scratches, flops = {}, [], 0
    for size in sizes:
        roots, placeholders, _ = tensors_at(rows_env(rows, size))
        k = lower_group(f"{name}_{size}", roots, outs, dict(zip(placeholders, ins)), num_threads, caps=caps)
        bodies[size] = k.body
        scratches += [b for b in k.params if b.scope == "scratch"]
        flops = k.flops // size
    n = None                              # the number of rows: the product of the rows' symbols
    for x in rows:
        if x.name not in sym_index:
            raise LoweringError(f"{name}: size {x.name} is not an input's")
        load = Load(syms, as_expr(sym_index[x.name]))
        n = load if n is None else n * load
    loops, done = [], as_expr(0)          # rows done by the larger blocks before
    for size in sizes:                   # blocks of each size over what the larger ones left, the rest one by one
        blk = Var("blk")
        count = (n - done) // size if size > 1 else n - done
        body_k = shift_stmt(bodies[size], {b: (done + blk * size) * c for b, c in per.items()})
        loops.append(For(blk, count, body_k, "serial" if _has_parallel(body_k) else "parallel"))
        done = done + count * size if size > 1 else done
    body = seq(*loops)
    for b, v in zip(outs + ins, list(gr.outputs) + list(gr.inputs)):
        b.size = v.type.numel
    return Kernel(name, outs + ins + [syms] + scratches, body, flops)
