"""Search strategies: which configurations to measure next, given what was measured so far.

Every strategy has the same two calls: `propose(count, seconds)` returns up to
`count` configurations not measured before (`seconds`: about how long it may
take to choose them; only the evolutionary pool is large enough to need it),
and `observe(config, score)` reports a
measurement (score: time relative to the default, lower is better; None: the
candidate failed). They differ in how they choose:

- random: uniform legal samples;
- genetic: a population of the best measured, children by crossover of
  tournament-chosen parents and mutation;
- annealing: simulated annealing, one neighbour at a time, a worse one kept
  with probability exp(-(worse by)/temperature), the temperature falling;
- evolutionary: Ansor's evolutionary search guided by a cost model: many
  children of the best measured (and random samples) are ranked by the
  model, refitted on every measurement, and the best predicted are
  measured, with a share of random picks so the model sees its mistakes.
"""
from __future__ import annotations

import math
import random
import time

import numpy as np

from ..kernels.knob_space import Config, KnobSpace
from .cost_model import make_cost_model


class Strategy:
    """The shared bookkeeping: what was measured and how it scored."""

    name = "base"

    def __init__(self, space: KnobSpace, seed: int = 0):
        self.space = space
        self.rng = random.Random(seed)
        self.scores: dict[tuple, float | None] = {}
        self.configs: dict[tuple, Config] = {}

    def observe(self, config: Config, score: float | None) -> None:
        key = self.space.key(config)
        self.scores[key] = score
        self.configs[key] = dict(config)

    def seen(self, config: Config) -> bool:
        return self.space.key(config) in self.scores

    def best(self, count: int) -> list[Config]:
        """The `count` best measured configurations, best first."""
        ranked = sorted((s, k) for k, s in self.scores.items() if s is not None)
        return [self.configs[k] for _, k in ranked[:count]]

    def _fresh(self, make, count: int, tries: int = 20, until: float | None = None,
               at_least: int = 1) -> list[Config]:
        """Up to `count` unmeasured, distinct configurations from `make()`; with `until` (a time.monotonic()
        value), fewer once that time has passed and `at_least` are found."""
        out: list[Config] = []
        keys = set()
        for _ in range(count * tries):
            if len(out) == count or (until is not None and len(out) >= at_least and time.monotonic() >= until):
                break
            config = make()
            key = self.space.key(config)
            if key not in self.scores and key not in keys:
                keys.add(key)
                out.append(config)
        return out

    def propose(self, count: int, seconds: float | None = None) -> list[Config]:
        raise NotImplementedError


class RandomSearch(Strategy):
    name = "random"

    def propose(self, count: int, seconds: float | None = None) -> list[Config]:
        return self._fresh(lambda: self.space.sample(self.rng), count)


class GeneticSearch(Strategy):
    name = "genetic"

    def __init__(self, space: KnobSpace, seed: int = 0, population: int = 8, mutation: float = 0.6):
        super().__init__(space, seed)
        self.population, self.mutation = population, mutation

    def _child(self) -> Config:
        parents = self.best(self.population)
        if len(parents) < 2:
            return self.space.sample(self.rng)

        def tournament() -> Config:
            a, b = self.rng.sample(range(len(parents)), 2)
            return parents[min(a, b)]  # parents are ranked: the lower index is the fitter
        child = self.space.crossover(tournament(), tournament(), self.rng)
        if self.rng.random() < self.mutation:
            child = self.space.mutate(child, self.rng)
        return child

    def propose(self, count: int, seconds: float | None = None) -> list[Config]:
        return self._fresh(self._child, count)


class SimulatedAnnealing(Strategy):
    name = "annealing"

    def __init__(self, space: KnobSpace, seed: int = 0, start_temperature: float = 0.3, cooling: float = 0.93):
        super().__init__(space, seed)
        self.temperature, self.cooling = start_temperature, cooling
        self.current: Config | None = None
        self.current_score = math.inf

    def observe(self, config: Config, score: float | None) -> None:
        super().observe(config, score)
        if score is None:
            return
        if self.current is None or score <= self.current_score:
            self.current, self.current_score = dict(config), score
        else:
            worse = math.log(score / self.current_score)  # relative: the same rule for any time scale
            if self.rng.random() < math.exp(-worse / max(self.temperature, 1e-6)):
                self.current, self.current_score = dict(config), score
        self.temperature *= self.cooling

    def propose(self, count: int, seconds: float | None = None) -> list[Config]:
        if self.current is None:
            return self._fresh(lambda: self.space.sample(self.rng), count)
        return self._fresh(lambda: self.space.mutate(self.current, self.rng), count)


class EvolutionarySearch(Strategy):
    """Cost-model-guided evolution (see the module docstring); `model` is the cost model used."""

    name = "evolutionary"

    def __init__(self, space: KnobSpace, seed: int = 0, pool: int = 256, elite: int = 8, explore: float = 0.25,
                 model: str = "auto"):
        super().__init__(space, seed)
        self.pool, self.elite, self.explore = pool, elite, explore
        self.model = make_cost_model(model)

    def _predict(self, configs: list[Config]) -> np.ndarray:
        measured = [(self.configs[k], s) for k, s in self.scores.items() if s is not None]
        x = np.array([self.space.features(c) for c, _ in measured])
        y = np.log([s for _, s in measured])
        self.model.fit(x, y)
        return self.model.predict(np.array([self.space.features(c) for c in configs]))

    def _offspring(self, elite: list[Config]) -> Config:
        if not elite or self.rng.random() < 0.2:
            return self.space.sample(self.rng)
        parent = self.rng.choice(elite)
        if len(elite) > 1 and self.rng.random() < 0.3:
            parent = self.space.crossover(parent, self.rng.choice(elite), self.rng)
        return self.space.mutate(parent, self.rng)

    def propose(self, count: int, seconds: float | None = None) -> list[Config]:
        if sum(s is not None for s in self.scores.values()) < 4:  # too little to learn from
            return self._fresh(lambda: self.space.sample(self.rng), count)
        elite = self.best(self.elite)
        # The pool grows until `seconds` are spent: where legality is costly (a sketch's check applies its
        # schedule) a full pool would take minutes, longer than measuring what it proposes.
        until = None if seconds is None else time.monotonic() + seconds
        pool = self._fresh(lambda: self._offspring(elite), self.pool, tries=4, until=until, at_least=count)
        if not pool:
            return []
        ranked = [pool[i] for i in np.argsort(self._predict(pool), kind="stable")]
        explore = sum(self.rng.random() < self.explore for _ in range(count))
        chosen = ranked[:count - explore]
        rest = ranked[count - explore:]
        chosen += self.rng.sample(rest, min(explore, len(rest)))
        return chosen


STRATEGIES = {cls.name: cls for cls in (RandomSearch, GeneticSearch, SimulatedAnnealing, EvolutionarySearch)}


def make_strategy(name: str, space: KnobSpace, seed: int = 0, **settings) -> Strategy:
    """The strategy called `name` (random, genetic, annealing, evolutionary) over `space`; settings go to
    its constructor (evolutionary: model="numpy" uses the numpy cost model even where xgboost is installed)."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown search strategy {name!r}: choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name](space, seed, **settings)


__all__ = ["EvolutionarySearch", "GeneticSearch", "RandomSearch", "STRATEGIES", "SimulatedAnnealing", "Strategy",
           "make_strategy"]
