"""The full neighbour list: its stencil of cell runs holds every cell within reach once, none beyond, and its
rows are padded to whole vectors. (Its pairs and forces against brute force: test_kernels.py.)"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from md_systems import random_system
from tensorkiln.md.full_neighbor_kernels import ROW_PADDING, row_stencil
from tensorkiln.md.lattice import Box
from tensorkiln.md.neighbor_kernels import CellGrid
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.simulation import NeighborSettings, Simulation


def _near_residues(grid: CellGrid, cutoff: float) -> set[tuple[int, ...]]:
    """Brute force: the cells (modulo the grid) with a point within `cutoff` of some point of cell 0."""
    widths = grid.box.lengths / np.array(grid.counts)
    near = set()
    for residue in itertools.product(*(range(n) for n in grid.counts)):
        # the nearest periodic copy of the residue's cell, offsets in whole cells
        gap = 0.0
        for r, n, w in zip(residue, grid.counts, widths):
            offset = min(abs(r - k * n) for k in (-1, 0, 1))
            gap += (max(offset - 1, 0) * w) ** 2
        if gap < cutoff * cutoff:
            near.add(residue)
    return near


@pytest.mark.parametrize("lengths, cutoff", [((33.6, 33.6, 33.6), 2.8), ((9.3, 8.1, 7.7), 2.8),
                                             ((5.6, 5.61, 7.9), 2.8), ((6.3, 12.0, 5.2), 2.6),
                                             ((6.0, 6.0, 6.0), 2.8)])
def test_rows_cover_each_near_cell_once(lengths, cutoff):
    grid = CellGrid.for_cutoff(Box((0.0, 0.0, 0.0), lengths), cutoff)
    counts = np.array(grid.counts)
    seen: list[tuple[int, ...]] = []
    for lo, hi, dy, dz in row_stencil(grid, cutoff).tolist():
        assert lo <= hi
        if not grid.needs_minimum_image:
            assert hi - lo + 1 <= counts[0]  # a run never wraps onto itself
        seen += [tuple(np.mod((dx, dy, dz), counts)) for dx in range(lo, hi + 1)]
    assert len(seen) == len(set(seen))
    assert set(seen) == _near_residues(grid, cutoff)


def test_rows_are_padded_with_the_atom_itself_to_whole_vectors(rng):
    system = random_system(rng, 90, (7.3, 8.1, 6.9))
    sim = Simulation(system, LJCut(cutoff=2.5), NeighborSettings(skin=0.3), threads=1)
    sim.build_neighbor_list()
    capacity = sim.neighbors.shape[1]
    for i, (plain, image) in enumerate(sim.neighbor_count.tolist()):
        front = sim.neighbors[i, plain:-(-plain // ROW_PADDING) * ROW_PADDING]
        back = sim.neighbors[i, capacity + (-image // ROW_PADDING) * ROW_PADDING:capacity - image]
        assert (front == i).all() and (back == i).all()
        assert i not in sim.neighbors[i, :plain] and i not in sim.neighbors[i, capacity - image:]
    assert int(sim.most_neighbors[0]) < capacity  # the padding fits the room too
