"""A template's search space: named knobs, each with its candidate values, and the legality rule.

A configuration is a plain {knob: value} dict (what tuning records hold). The
space is the product of the knobs' values, less the illegal points;
`repair` moves a point made by a search move (a mutation, a crossover) onto a
legal one near it where it can (round a block size to a multiple of the
register tile), and `legal` is the template's own check, the same one
`tuned.configured` applies to a record. The template's analytic choice is
always a member (`default`), whatever the knob lists hold.

`features` turns a configuration into numbers for the tuner's cost model
(extents, tile shapes, bytes per cache level, arithmetic intensity); the
template provides them because only it knows what a knob does.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

Config = dict


@dataclass
class KnobSpace:
    """The configurations of one workload of one template (see the module docstring)."""

    workload: str
    knobs: dict[str, tuple]
    default: Config
    legal: Callable[[Config], bool]
    repair: Callable[[Config], Config | None] = lambda config: config
    features: Callable[[Config], list[float]] = field(default=lambda config: [])
    # legal's verdict per point: a search asks about the same neighbours again and again, and a sketch's
    # check applies its whole schedule (the rule is fixed for the space's life, so a verdict stays true)
    verdicts: dict[tuple, bool] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # the analytic choice is a candidate even where a knob's list misses its value
        self.knobs = {name: tuple(sorted(set(values) | {self.default[name]}, key=_order))
                      for name, values in self.knobs.items()}
        if not self.contains(self.default):
            raise ValueError(f"{self.workload}: the analytic configuration {self.default} is not legal in its space")

    @property
    def size(self) -> int:
        """Points of the knob product (legal or not): how large a space the search faces."""
        return math.prod(len(v) for v in self.knobs.values())

    def key(self, config: Config) -> tuple:
        return tuple(config[name] for name in self.knobs)

    def contains(self, config: Config) -> bool:
        if set(config) != set(self.knobs) or not all(config[k] in v for k, v in self.knobs.items()):
            return False
        key = self.key(config)
        if key not in self.verdicts:
            self.verdicts[key] = bool(self.legal(config))
        return self.verdicts[key]

    def fix(self, config: Config) -> Config | None:
        """`config` made legal by `repair`, or None where it cannot be."""
        repaired = self.repair(dict(config))
        return repaired if repaired is not None and self.contains(repaired) else None

    def sample(self, rng: random.Random, tries: int = 200) -> Config:
        """A random legal configuration (the default if none is found in `tries` draws)."""
        for _ in range(tries):
            point = self.fix({name: rng.choice(values) for name, values in self.knobs.items()})
            if point is not None:
                return point
        return dict(self.default)

    def mutate(self, config: Config, rng: random.Random, tries: int = 50) -> Config:
        """A legal neighbour: one knob moved to an adjacent value (sometimes to any value)."""
        for _ in range(tries):
            name = rng.choice(list(self.knobs))
            values = self.knobs[name]
            at = values.index(config[name]) if config[name] in values else 0
            if rng.random() < 0.8:
                at = min(max(at + rng.choice((-1, 1)), 0), len(values) - 1)
            else:
                at = rng.randrange(len(values))
            point = self.fix({**config, name: values[at]})
            if point is not None and point != config:
                return point
        return self.sample(rng)

    def crossover(self, a: Config, b: Config, rng: random.Random) -> Config:
        """Each knob from one parent or the other (repaired; a parent where that fails)."""
        child = self.fix({name: (a if rng.random() < 0.5 else b)[name] for name in self.knobs})
        return child if child is not None else dict(a)


def _order(value: object) -> tuple:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


__all__ = ["Config", "KnobSpace"]
