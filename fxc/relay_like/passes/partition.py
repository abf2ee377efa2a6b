"""The partition step (BYOC): which nodes the target's external libraries run, as regions, and why each op is or
is not offloaded.

Takes the Planned graph after hoisting and a PassContext whose `libraries` are the target's -libs= entries
(fxc.backends.external.Library: a pattern table whose checks read the target's Caps), `offload` ("auto": keep a
match only where `cost` measured the library faster than fxc's own kernel; "always": every match, for tests) and
`cost` ((library, nodes, the graph's weight ids) -> (library seconds, fxc seconds), the driver's measurement,
cached). Produces the Planned graph with `regions` (Region: one library's matches, adjacent ones merged when no
dependency leaves the region and re-enters it) and `offload_notes` (node name -> the reason it runs where it runs).
A graph without -libs= passes unchanged. fuse_groups then keeps each match one group of its own; the driver lowers
it with `Library.lower`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Region:
    library: str
    matches: tuple          # ((pattern name, (nodes, producers first)), ...) in graph order

    @property
    def nodes(self) -> list:
        return [n for _, ns in self.matches for n in ns]


def _claim(n, lib, users, hoisted, weights, ctx, notes):
    """The first match of lib's patterns at n that its check and the cost choice accept: (pattern, nodes) or
    None, the reason written to notes either way."""
    for pat in lib.patterns:
        nodes = pat.match(n, users)
        if nodes is None:
            continue
        if any(x.outputs[0].id in hoisted for x in nodes):
            notes[n.name] = f"{lib.name}/{pat.name}: reads weights only, computed once in the prepack step by fxc"
            return None
        why = pat.check(nodes, ctx.caps)
        if why is not None:
            notes[n.name] = f"{lib.name}/{pat.name} refused: {why}"
            for x in nodes[:-1]:        # (its producers keep the first refusal unless a later match takes them)
                notes.setdefault(x.name, notes[n.name])
            continue
        if lib.whole_regions:
            notes[n.name] = f"{lib.name}/{pat.name}: offloaded (by pattern; fxc's kernels kept as its fallback)"
            return pat.name, tuple(nodes)
        if ctx.offload == "always" or ctx.cost is None:
            notes[n.name] = f"{lib.name}/{pat.name}: offloaded (offload={ctx.offload!r})"
            return pat.name, tuple(nodes)
        t_lib, t_fxc = ctx.cost(lib, nodes, weights)
        figures = f"{lib.name} {1e3 * t_lib:.3f} ms, fxc {1e3 * t_fxc:.3f} ms"
        if t_lib < t_fxc:
            notes[n.name] = f"{lib.name}/{pat.name}: offloaded, measured faster ({figures})"
            return pat.name, tuple(nodes)
        notes[n.name] = f"{lib.name}/{pat.name}: kept by fxc, measured faster ({figures})"
        return None
    return None


def _convex(members: set, users: dict) -> bool:
    """No path leaves members and comes back: nothing outside that a member reaches also reaches a member."""
    reached = set()
    frontier = [u for n in members for o in n.outputs for u, _ in users.get(o.id, []) if u not in members]
    while frontier:
        u = frontier.pop()
        if u in reached:
            continue
        reached.add(u)
        for o in u.outputs:
            for w, _ in users.get(o.id, []):
                if w in members:
                    return False
                frontier.append(w)
    return True


def _runs(matches: list, g, hoisted) -> set:
    """The indices of the matches that continue the match before them: together they are a run of the graph's
    per-call nodes in order with no other node between (convex by construction, and one contiguous stretch of the
    plan, as a whole-region library's call replaces its fallback launches in place)."""
    order = [n for n in g.nodes if n.outputs[0].id not in hoisted]
    at = {n: i for i, n in enumerate(order)}
    spans = [(min(at[n] for n in ns), max(at[n] for n in ns)) for _, _, ns in matches]
    return {i for i in range(1, len(matches)) if matches[i][0] == matches[i - 1][0]
            and spans[i][0] == spans[i - 1][1] + 1}


def merge_regions(matches: list, g, whole: frozenset = frozenset(), hoisted=frozenset()) -> list:
    """Regions of one library each: a match joins the region of a match it reads from or feeds (an edge between
    them) when the union stays convex (no dependency leaves and re-enters); for the libraries in whole (whole-region
    calls), a match joins the region before it when they are one run of nodes (_runs)."""
    users, regions, runs = g.users(), [], _runs(matches, g, hoisted)
    for i, (lib, pat, nodes) in enumerate(matches):
        if lib in whole:
            if i in runs:
                regions[-1][1].append((pat, nodes))
            else:
                regions.append((lib, [(pat, nodes)]))
            continue
        mine = set(nodes)
        for r in regions:
            if r[0] != lib or r[0] in whole:
                continue
            theirs = {n for _, ns in r[1] for n in ns}
            touches = any(v.node in theirs for n in nodes for v in n.inputs) or \
                any(u in mine for n in theirs for o in n.outputs for u, _ in users.get(o.id, []))
            if touches and _convex(theirs | mine, users):
                r[1].append((pat, nodes))
                break
        else:
            regions.append((lib, [(pat, nodes)]))
    return [Region(lib, tuple(ms)) for lib, ms in regions]


def describe_partition(p) -> list:
    """Lines for fxc.explain: each region (its library and matches, then why each match was offloaded), then every
    node left to fxc with its reason; [] for a build without -libs=."""
    if not p.offload_notes:
        return []
    lines, inside = [], set()
    for i, r in enumerate(p.regions):
        lines.append(f"region {i} -> {r.library}: " + ", ".join(f"{pat}({'+'.join(n.op for n in ns)} {ns[-1].name})"
                                                                 for pat, ns in r.matches))
        lines += [f"  {pat} {ns[-1].name}: {p.offload_notes[ns[-1].name]}" for pat, ns in r.matches
                  if ns[-1].name in p.offload_notes]
        inside.update(n.name for n in r.nodes)
    lines += [f"fxc: {n.op} {n.name}: {p.offload_notes[n.name]}" for n in p.graph.nodes
              if n.name not in inside and n.name in p.offload_notes]
    return lines


def partition_external(p, ctx):
    """The plan step: p with its regions and the reason for every node (none without -libs=)."""
    if not ctx.libraries:
        return p
    g, notes, matches, taken = p.graph, {}, [], set()
    users = g.users()
    for n in reversed(g.nodes):             # roots first, so a chain pattern takes its producers
        if n in taken:
            continue
        for lib in ctx.libraries:
            hit = _claim(n, lib, users, p.hoisted, g.weights, ctx, notes)
            if hit is not None and not taken & set(hit[1]):
                matches.append((lib.name, hit[0], hit[1]))
                taken.update(hit[1])
                notes.update({x.name: notes[n.name] for x in hit[1]})
                break
        else:
            notes.setdefault(n.name, f"no pattern of {', '.join(lib.name for lib in ctx.libraries)} "
                                     f"matches {n.op}")
    order = {n: i for i, n in enumerate(g.nodes)}
    matches.sort(key=lambda m: order[m[2][-1]])
    whole = frozenset(lib.name for lib in ctx.libraries if lib.whole_regions)
    regions = merge_regions(matches, g, whole, p.hoisted)
    for r in regions:
        if all(n.op == "reshape" for n in r.nodes):     # (views: nothing for a library to run)
            notes.update({n.name: f"{r.library}/reshape: a region of reshapes only is a view, left to fxc"
                          for n in r.nodes})
    regions = tuple(r for r in regions if not all(n.op == "reshape" for n in r.nodes))
    return replace(p, regions=regions, offload_notes=notes)
