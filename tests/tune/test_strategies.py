"""The search strategies find the optimum of a synthetic cost function; the cost models learn one."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.kernels.knob_space import KnobSpace
from tensorkiln.tune.cost_model import NumpyBoostedTrees
from tensorkiln.tune.strategies import STRATEGIES, make_strategy


def synthetic_space() -> KnobSpace:
    """16 x 16 x 4 points, odd x illegal; the cost is a bowl with its bottom at x=10, y=3, z='b'."""
    return KnobSpace("synthetic", {"x": tuple(range(16)), "y": tuple(range(16)), "z": ("a", "b", "c", "d")},
                     {"x": 0, "y": 0, "z": "a"}, legal=lambda c: c["x"] % 2 == 0,
                     features=lambda c: [c["x"], c["y"], "abcd".index(c["z"])])


def cost(config) -> float:
    return 1.0 + 0.02 * ((config["x"] - 10) ** 2 + (config["y"] - 3) ** 2) + 0.3 * (config["z"] != "b")


def search(name: str, trials: int, seed: int = 0) -> float:
    space = synthetic_space()
    # the numpy cost model: the tuner's fallback without xgboost, and no import of xgboost here
    strategy = make_strategy(name, space, seed, **({"model": "numpy"} if name == "evolutionary" else {}))
    strategy.observe(space.default, cost(space.default))
    measured = 1
    while measured < trials:
        batch = strategy.propose(min(4, trials - measured))
        if not batch:
            break
        for config in batch:
            assert space.contains(config) and not strategy.seen(config)
            strategy.observe(config, cost(config))
            measured += 1
    return min(s for s in strategy.scores.values())


def test_random_search_covers_the_space_without_repeats():
    assert search("random", 8 * 16 * 4) == 1.0  # every legal point once: the optimum among them


@pytest.mark.parametrize("name", ["genetic", "annealing", "evolutionary"])
def test_strategies_find_the_optimum(name):
    # 512 legal points; the guided searches find the bottom in well under half of them
    found = [search(name, 120, seed) for seed in range(3)]
    assert min(found) == 1.0, found
    assert np.median(found) <= 1.02, found


def test_failed_candidates_are_never_proposed_again():
    space = synthetic_space()
    strategy = make_strategy("evolutionary", space, 0, model="numpy")
    for config in strategy.propose(6):
        strategy.observe(config, None)
    assert all(not strategy.seen(c) for c in strategy.propose(20))


def test_numpy_boosted_trees_learn_a_smooth_function(rng):
    x = rng.uniform(0, 10, (100, 3))
    y = (x[:, 0] - 4) ** 2 + 3 * (x[:, 1] > 5)
    model = NumpyBoostedTrees().fit(x, y)
    test = rng.uniform(0, 10, (100, 3))
    truth = (test[:, 0] - 4) ** 2 + 3 * (test[:, 1] > 5)
    assert np.corrcoef(model.predict(test), truth)[0, 1] > 0.95


def test_unknown_strategy_is_named():
    with pytest.raises(ValueError, match="choose one of random, genetic, annealing, evolutionary"):
        make_strategy("beam", synthetic_space())
    assert set(STRATEGIES) == {"random", "genetic", "annealing", "evolutionary"}


def test_legality_is_asked_once_per_point():
    """A space remembers each point's verdict: a sketch's check applies its whole schedule."""
    asked = []
    space = KnobSpace("counted", {"x": tuple(range(8))}, {"x": 0},
                      legal=lambda c: asked.append(c["x"]) or c["x"] % 3 != 1)
    for _ in range(3):
        assert [space.contains({"x": x}) for x in range(8)] == [x % 3 != 1 for x in range(8)]
    assert sorted(asked) == list(range(8))


def test_the_evolutionary_pool_stops_growing_when_its_time_is_spent():
    """With a costly legality rule a full pool would take long; past `seconds` it keeps what it has (at least
    the batch) and ranks that."""
    import time
    checks = []

    def slow_legal(config) -> bool:
        checks.append(1)
        time.sleep(0.002)
        return config["x"] % 2 == 0

    space = KnobSpace("slow", {"x": tuple(range(64)), "y": tuple(range(64))}, {"x": 0, "y": 0}, legal=slow_legal,
                      features=lambda c: [c["x"], c["y"]])
    strategy = make_strategy("evolutionary", space, 0, model="numpy")
    for x, y in [(0, 0), (2, 5), (4, 9), (6, 1), (8, 8)]:
        strategy.observe({"x": x, "y": y}, cost({"x": x, "y": y, "z": "b"}))
    checks.clear()
    batch = strategy.propose(3, seconds=0.05)
    assert len(batch) == 3 and all(space.contains(c) and not strategy.seen(c) for c in batch)
    assert len(checks) < 200  # a full pool of 256 children asks about hundreds of points more
