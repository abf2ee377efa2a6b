"""Schedule knobs: the named choices a schedule makes for one fused group, each with the default an untuned build
makes (from the target's Caps and the group's shapes) and the values a tuner may give it instead.

Takes a config (knob name -> value: a tuned record's, or {} for the defaults); produces the value of each knob a
schedule asks for (`Chooser`) and the group's search `Space`: the knobs its schedules declared, each with its
choices, and the constraints a whole config must meet (registers, local memory, work-group limits, divisibility).

- cpu family: a schedule declares a knob where it makes the choice, `conv.knob(name, default, choices, doc)` (the
  Converter holds the group's Chooser): a group's space is what its default lowering declared, so the choices can
  follow from its shapes (the divisors of a row, the tiles that fit the registers); a rule between two of its
  knobs (a tile's rows x vectors within the accumulator registers) is `conv.knob.constrain(doc, ok)`.
- gpu family: the 20 fields of `schedules.gpu.Knobs`, declared once with their choices and constraints
  (`gpu.knob_space(caps)`); a config replaces fields of `Knobs.for_caps(caps)`.

With an empty config every knob takes its default: the code is that of a build before knobs existed, byte for byte.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Knob:
    """One named choice: its values (the default first) and what it decides."""
    name: str
    choices: tuple
    default: object
    doc: str = ""


@dataclass(frozen=True)
class Constraint:
    """A rule a whole config must meet (doc says which: registers, local memory, work-group size, divisibility)."""
    doc: str
    ok: object          # (config: dict with every knob) -> bool


@dataclass
class Space:
    """The knobs of one fused group's schedules and the constraints over them."""
    family: str
    knobs: dict = field(default_factory=dict)           # name -> Knob
    constraints: tuple = ()

    def defaults(self) -> dict:
        return {k.name: k.default for k in self.knobs.values()}

    def full(self, config: dict) -> dict:
        """config with every knob it leaves out at its default (names the space lacks dropped)."""
        return {n: config.get(n, k.default) for n, k in self.knobs.items()}

    def violations(self, config: dict) -> list:
        """What is wrong with config: values outside a knob's choices, unknown knobs, broken constraints."""
        bad = [f"unknown knob {n!r}" for n in config if n not in self.knobs]
        bad += [f"{n}={v!r} is not one of {self.knobs[n].choices}" for n, v in config.items()
                if n in self.knobs and v not in self.knobs[n].choices]
        whole = self.full(config)
        return bad + [c.doc for c in self.constraints if not c.ok(whole)]

    def valid(self, config: dict) -> bool:
        return not self.violations(config)

    def size(self) -> int:
        n = 1
        for k in self.knobs.values():
            n *= len(k.choices)
        return n

    def all(self, limit: int = 4096) -> list:
        """Every valid config (minimal form), for a space of at most `limit` configs (else [])."""
        if self.size() > limit:
            return []
        names = list(self.knobs)
        out = []
        for values in itertools.product(*(self.knobs[n].choices for n in names)):
            c = dict(zip(names, values))
            if self.valid(c):
                out.append(self.minimal(c))
        return out

    def minimal(self, config: dict) -> dict:
        """config without the knobs at their default (what a tuning record stores)."""
        return {n: v for n, v in self.full(config).items() if v != self.knobs[n].default}

    def sample(self, rng: random.Random, tries: int = 200) -> dict:
        """A random valid config (minimal form); the defaults when none is found in `tries` draws."""
        for _ in range(tries):
            c = {n: rng.choice(k.choices) for n, k in self.knobs.items()}
            if self.valid(c):
                return self.minimal(c)
        return {}

    def mutate(self, config: dict, rng: random.Random, tries: int = 50) -> dict:
        """config with one or two knobs changed to another of their choices, still valid (config itself if none)."""
        tunable = [k for k in self.knobs.values() if len(k.choices) > 1]
        for _ in range(tries if tunable else 0):
            c = self.full(config)
            for k in rng.sample(tunable, min(len(tunable), rng.choice((1, 1, 2)))):
                c[k.name] = rng.choice([v for v in k.choices if v != c[k.name]])
            if self.valid(c):
                return self.minimal(c)
        return dict(config)


class Chooser:
    """A group's config while its CPU schedules run: `chooser(name, default, choices, doc)` is the config's value
    when it names one of the choices, else the default; every knob asked for is recorded in `declared`, every rule
    between knobs a schedule states (`constrain`) in `constraints`."""

    def __init__(self, config: dict | None = None):
        self.config = dict(config or {})
        self.declared: dict = {}
        self.constraints: dict = {}         # doc -> Constraint

    def __call__(self, name: str, default, choices=(), doc: str = ""):
        choices = tuple(dict.fromkeys((default, *choices)))     # the default first, no repeats
        self.declared.setdefault(name, Knob(name, choices, default, doc))
        value = self.config.get(name, default)
        return value if value in choices else default

    def constrain(self, doc: str, ok) -> None:
        """A rule over the knobs declared so far that a whole config must meet, e.g. the accumulator registers a
        tile of `rows` x `vectors` takes (ok: config with every knob -> bool; doc names the rule)."""
        self.constraints.setdefault(doc, Constraint(doc, ok))

    def space(self) -> Space:
        return Space("cpu", dict(self.declared), tuple(self.constraints.values()))
