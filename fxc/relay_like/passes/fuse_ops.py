"""Operator fusion (TVM's rules): groups of nodes that become one kernel each.

- an elementwise/broadcast/injective producer with a single consumer is inlined into that consumer
  when the consumer is elementwise/broadcast/injective or a reduction (prologue);
- an elementwise/injective producer read by a few nodes that all ended in one group joins that group too
  (a diamond, `_join_diamond`): its expression is inlined at each read;
- an elementwise/broadcast consumer of a reduction or conv/matmul output, at the same shape, joins
  its group as an epilogue (bias, batch-norm, residual add, activation); so does a group of elementwise
  nodes that read that output several times (x * sigmoid(x), `_reread_epilogue`);
- a group holds at most one reduction/conv/matmul anchor; an op that `stands_alone` (Kind.OPAQUE: its kernel may be
  loop IR written whole, which lowering cannot inline) is a group of its own: `union` refuses it, whichever rule
  asks; multi-output ops take prologues only;
- a zero pad into a depthwise conv, and bf16 pairing into a 1x1 bf16 conv run as a GEMM or into a bf16 conv
  over NCHW16c: their schedules read through the producer (that node alone); conv2d_weight_grad takes no
  prologue;
- a value computed from weights only (`hoisted`, see hoist.py) is not fused into a consumer that reads
  activations: it is computed once in the prepack step and read from memory, as a constant would be;
- a reshape is not a group's root (unless a graph output): it stays a view of its producer's output
  (plan_memory.reshape_views);
- a group's chains of nodes are at most FUSE_DEPTH long: lowering inlines a group into one expression, as deep as
  its longest chain, which every walk of the loop IR and the renderers follows by recursion (a chain of 10,000
  elementwise ops becomes kernels of FUSE_DEPTH ops each, each one pass over memory).
Accepts a typed graph; returns Groups in topological order, each with one root node. The plan step fuse_groups
records them on the Planned graph (relay_like/planned.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...lowering.schedules import rule
from ...ops.registry import Kind, get_op


@dataclass(eq=False)
class Group:
    nodes: list                      # topological order; the last is the root
    inputs: list = field(default_factory=list)    # Values read from outside (incl. constants)
    outputs: list = field(default_factory=list)   # Values of the root read outside / graph outputs

    @property
    def root(self):
        return self.nodes[-1]

    @property
    def anchor(self):
        for n in self.nodes:
            if get_op(n.op).kind >= Kind.REDUCTION:
                return n
        return None

    def describe(self) -> str:
        a = self.anchor
        ops = "+".join(n.op for n in self.nodes)
        return f"{ops} -> {', '.join(f'{o.type!r}' for o in self.outputs)}" + (f"  [anchor {a.op}]" if a else "")


def _pads_depthwise(p, n) -> bool:
    """A zero constant pad of H and W only, read by a float32 depthwise conv2d, NCHW or NCHW16c (whose schedules skip
    the pad)."""
    if p.op != "pad" or n.op not in ("conv2d", "depthwise_blocked") or p.attrs.get("mode", "constant") != "constant" \
            or p.attrs.get("value", 0.0):
        return False
    x, w = n.inputs
    pad = tuple(p.attrs.get("pad", ()))
    if n.op == "depthwise_blocked":
        return x.dtype == "float32" and len(pad) == 6 and pad[:2] == (0, 0) and min(pad) >= 0
    return (x.dtype == "float32" and len(pad) == 4 and min(pad) >= 0 and len(x.shape) == 4 and w.shape[1] == 1
            and n.attrs.get("groups", 1) == p.inputs[0].shape[1] > 1)


def _pairs_for_gemm(p, n) -> bool:
    """The bf16 words of float32 channel pairs read by a 1x1 stride-1 bf16 conv that runs as a GEMM over the
    positions: its schedule makes the words of each position block in a local buffer (no words tensor in memory,
    no kernel of its own)."""
    if p.op != "pack_bf16_pairs" or n.op != "conv2d_packed_bf16":
        return False
    if n.attrs.get("blocked_in"):       # NCHW16c words: made per row tile into a local panel (schedules/cpu/gemm.py)
        return p.attrs.get("axis") == 4
    if p.attrs.get("axis") != 1:
        return False
    conv1x1_as_gemm = rule("cpu", "conv1x1_as_gemm")
    x, wp = n.inputs
    return (len(x.shape) == 4 and wp.shape[2:4] == (1, 1) and tuple(n.attrs.get("stride", (1, 1))) == (1, 1)
            and x.shape[2:] == n.outputs[0].shape[2:]
            and conv1x1_as_gemm(p.inputs[0].shape[1], n.outputs[0].shape[1], x.shape[2] * x.shape[3]))


FUSE_DEPTH = 64         # the longest chain of nodes in a group: its expression's depth, in ops (an op may be a few
                        # expression levels, each a few Python frames in the recursive walks, under torch.compile's
                        # own deep stack); far past where fusing more saves memory traffic
DIAMOND_NODES = 8       # the most nodes of an anchorless group that joins the one group of all its readers
DIAMOND_READERS = 4


def _join_diamond(p, users, out_ids, hoisted, find, anchors, size, union) -> bool:
    """Join p's group (no anchor, at most DIAMOND_NODES nodes, ending in an elementwise or injective p) into
    the group of its readers when they are several nodes that all ended in that one group, each a consumer
    that could take p as a prologue: the shape of a diamond, e.g. a bilinear interpolation's gathers, each read
    twice by its lerp. p's expression is then inlined at each read (lower.py), where LLVM's CSE merges the
    copies, instead of a pass over memory of its own. True if it joined."""
    if len(p.outputs) != 1 or get_op(p.op).kind > Kind.INJECTIVE:
        return False
    v = p.outputs[0]
    readers = {id(u): u for u, _ in users.get(v.id, [])}
    if v.id in out_ids or not 2 <= len(readers) <= DIAMOND_READERS:
        return False
    a = find(p)
    if anchors[a] is not None or size[a] > DIAMOND_NODES or len({id(find(u)) for u in readers.values()}) != 1:
        return False
    for n in readers.values():
        if find(n) is a or len(n.outputs) != 1 or get_op(n.op).kind > Kind.REDUCTION \
                or n.op == "conv2d_weight_grad" or (v.id in hoisted and n.outputs[0].id not in hoisted):
            return False
    return union(p, next(iter(readers.values())))


def _reread_epilogue(v, n, users, out_ids, find, anchors) -> bool:
    """v, the output of an anchor's group, is read by several elementwise nodes at its own shape that all ended in
    n's group (no anchor of its own), n the last of them: x * sigmoid(x) after a conv. That group joins v's as its
    epilogue, each read of v being the accumulator at the same element, instead of v going through memory to a
    kernel of its own."""
    p = v.node
    if p is None or v.is_const or v.id in out_ids or len(p.outputs) != 1 or anchors[find(p)] is None \
            or anchors[find(n)] is not None or find(p) is find(n):
        return False
    readers = {id(u): u for u, _ in users.get(v.id, [])}
    if len(readers) < 2:
        return False
    for u in readers.values():
        if len(u.outputs) != 1 or get_op(u.op).kind > Kind.BROADCAST or u.outputs[0].shape != v.shape \
                or find(u) is not find(n):
            return False
    return n.outputs[0].dtype == v.dtype and get_op(n.op).kind <= Kind.BROADCAST


def fuse_ops(g, enable: bool = True, hoisted: frozenset = frozenset(), external: tuple = ()) -> list:
    """external: node lists (an external library's matches, passes/partition.py) that are one group each, joined
    by nothing else."""
    users = g.users()
    out_ids = {v.id for v in g.outputs}
    parent = {n: n for n in g.nodes}

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    anchors = {n: (n if get_op(n.op).kind >= Kind.REDUCTION else None) for n in g.nodes}
    alone = {n for n in g.nodes if get_op(n.op).stands_alone}     # never joined: each stays its own group's root
    for nodes in external:
        parent.update({n: nodes[-1] for n in nodes})
        alone.add(nodes[-1])
    size = {n: 1 for n in g.nodes}
    depth = {n: 1 for n in g.nodes}     # a bound on the longest chain of nodes in the group (the sum when joined)

    def union(producer, consumer) -> bool:
        a, b = find(producer), find(consumer)
        if a is b:
            return True
        if a in alone or b in alone or (anchors[a] is not None and anchors[b] is not None) \
                or depth[a] + depth[b] > FUSE_DEPTH:
            return False
        parent[a] = b
        anchors[b] = anchors[b] or anchors[a]
        size[b] += size[a]
        depth[b] += depth[a]
        return True

    if enable:
        for n in g.nodes:
            kn = get_op(n.op).kind
            for v in n.inputs:
                p = v.node
                if p is None or v.is_const or len(p.outputs) != 1 or v.id in out_ids:
                    continue
                if v.id in hoisted and n.outputs[0].id not in hoisted:
                    continue
                if len(users.get(v.id, [])) != 1 or len({id(u) for u, _ in users[v.id]}) != 1:
                    continue
                kp = get_op(p.op).kind
                if _pads_depthwise(p, n) or _pairs_for_gemm(p, n):
                    if size[find(p)] == 1:
                        union(p, n)                 # the conv's schedule reads through it (no copy)
                    continue                        # (through that node alone: a pad of a fused chain is a copy)
                if n.op == "conv2d_weight_grad":
                    continue                        # its reduction vectorizes over affine reads only (a fused zero
                                                    # pad: clamped scalar reads, 6.1 against 0.9 ms at 96x112x112)
                if len(n.outputs) != 1 and kp <= Kind.INJECTIVE and kn <= Kind.REDUCTION:
                    union(p, n)                     # prologue into a multi-output reduction-like op
                elif len(n.outputs) != 1:
                    continue
                elif kp <= Kind.INJECTIVE and kn <= Kind.REDUCTION and (
                        anchors[find(p)] is None or (kn <= Kind.BROADCAST and n.outputs[0].shape == v.shape)):
                    union(p, n)                     # injective prologue (or epilogue chain of an anchor)
                elif kp in (Kind.REDUCTION, Kind.OUT_FUSABLE) and kn <= Kind.BROADCAST \
                        and n.outputs[0].shape == v.shape and n.outputs[0].dtype == v.dtype:
                    union(p, n)                     # elementwise epilogue
            for v in n.inputs:
                if not (v.id in hoisted and n.outputs[0].id not in hoisted) \
                        and _reread_epilogue(v, n, users, out_ids, find, anchors):
                    union(v.node, n)                # an epilogue that reads the anchor's value twice (SiLU)
        while any(_join_diamond(p, users, out_ids, hoisted, find, anchors, size, union) for p in reversed(g.nodes)):
            pass

    members: dict = {}
    for n in g.nodes:
        members.setdefault(find(n), []).append(n)
    lists = []
    for nodes in members.values():
        last = nodes[-1]
        if last.op == "reshape" and len(nodes) > 1 and last.inputs[0].node is nodes[-2] and \
                last.outputs[0].id not in out_ids:
            lists += [nodes[:-1], [last]]     # a reshape as the root would index its producers through its own
        else:                                 # flat shape (div/mod); alone it is a view of their output
            lists.append(nodes)
    groups = []
    for nodes in lists:
        root = nodes[-1]
        inside = {o.id for n in nodes for o in n.outputs}
        ins = []
        for n in nodes:
            for v in n.inputs:
                if v.id not in inside and all(v is not x for x in ins):
                    ins.append(v)
        outs = [o for o in root.outputs]
        groups.append(Group(nodes, ins, outs))
    order = {n: i for i, n in enumerate(g.nodes)}
    groups.sort(key=lambda gr: order[gr.root])
    return groups


def fuse_groups(p, ctx):
    """The plan step: p.groups, the fused groups of p.graph (ctx.fuse False: a group per node), the values of
    p.hoisted kept out of the groups that run per call, each external match (p.regions) a group of its own."""
    external = tuple(nodes for r in p.regions for _, nodes in r.matches)
    return replace(p, groups=fuse_ops(p.graph, enable=ctx.fuse, hoisted=p.hoisted, external=external))
