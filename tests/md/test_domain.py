"""The processor grid and sub-boxes of a decomposed run, without MPI."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.md.domain import Domain, processor_grid
from tensorkiln.md.lattice import Box, MDInputError


@pytest.mark.parametrize("ranks, lengths, grid", [
    (1, (10, 10, 10), (1, 1, 1)),
    (2, (10, 10, 10), (1, 1, 2)),      # ties keep LAMMPS's first: z is split first on a cube
    (4, (10, 10, 10), (1, 2, 2)),
    (8, (10, 10, 10), (2, 2, 2)),
    (2, (30, 10, 10), (2, 1, 1)),      # a long box is cut across its length
    (6, (10, 20, 30), (1, 2, 3)),
    (7, (10, 10, 10), (1, 1, 7)),      # a prime count has one way
])
def test_processor_grid_has_least_surface(ranks, lengths, grid):
    assert processor_grid(ranks, lengths) == grid
    px, py, pz = grid
    assert px * py * pz == ranks


def test_processor_grid_surface_is_minimal_by_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(20):
        ranks = int(rng.integers(1, 25))
        lengths = rng.uniform(1, 10, 3)

        def surface(g):
            return sum(lengths[a] * lengths[b] / (g[a] * g[b]) for a, b in ((0, 1), (0, 2), (1, 2)))
        grids = [(a, b, ranks // (a * b)) for a in range(1, ranks + 1) for b in range(1, ranks + 1)
                 if ranks % (a * b) == 0]
        assert surface(processor_grid(ranks, lengths)) == pytest.approx(min(surface(g) for g in grids))


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 6, 12])
def test_every_atom_has_exactly_one_owner_and_neighbours_are_mutual(ranks):
    box = Box((-1.0, 0.5, 2.0), (6.0, 4.0, 9.5))
    rng = np.random.default_rng(ranks)
    x = rng.uniform(box.lo, box.hi, (500, 3))
    x[:6] = np.array(box.lo)  # atoms on sub-box faces and the box's lower corner
    x[6:9] = np.array(box.hi) - 1e-13
    domains = [Domain.for_rank(box, ranks, r) for r in range(ranks)]
    owners = np.sum([d.owned(x) for d in domains], axis=0)
    assert np.all(owners == 1)
    for d in domains:
        assert np.all(d.sub_lo >= np.array(box.lo) - 1e-12) and np.all(d.sub_hi <= np.array(box.hi) + 1e-12)
        assert d.rank_at(d.coordinates) == d.rank
        for dim in range(3):
            low = domains[d.neighbor(dim, -1)]
            assert low.neighbor(dim, 1) == d.rank
    volumes = [np.prod(d.sub_hi - d.sub_lo) for d in domains]
    assert sum(volumes) == pytest.approx(box.volume)


def test_wrap_puts_positions_into_the_box():
    box = Box((0.0, 0.0, 0.0), (2.0, 3.0, 4.0))
    d = Domain.for_rank(box, 1, 0)
    x = np.array([[-0.5, 3.5, 4.0], [2.0, -3.0, 0.1]])
    np.testing.assert_allclose(d.wrap(x), [[1.5, 0.5, 0.0], [0.0, 0.0, 0.1]])


def test_too_many_ranks_for_the_cutoff_is_an_error_naming_the_sizes():
    box = Box((0.0, 0.0, 0.0), (10.0, 10.0, 10.0))
    with pytest.raises(MDInputError, match=r"8 ranks as a 1x1x8 grid make sub-boxes 1.25 wide along z, narrower "
                                           r"than the neighbour cutoff 2.8"):
        Domain(box, (1, 1, 8), 0).check_ghost_cutoff(2.8)
    Domain(box, (1, 1, 3), 0).check_ghost_cutoff(2.8)  # 3.33 wide: one swap reaches
