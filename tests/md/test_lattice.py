"""Lattices, boxes and create_atoms as LAMMPS defines them."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.md.lattice import Box, Lattice, MDInputError, block_region, create_atoms


@pytest.mark.parametrize("style, basis", [("sc", 1), ("bcc", 2), ("fcc", 4)])
@pytest.mark.parametrize("cells", [(1, 1, 1), (2, 3, 5), (4, 4, 4)])
def test_atom_count_and_density(style, basis, cells):
    lattice = Lattice.from_density(style, 0.8442)
    box = block_region(lattice, (0, cells[0], 0, cells[1], 0, cells[2]))
    x = create_atoms(lattice, box)
    assert len(x) == basis * np.prod(cells)
    assert len(x) / box.volume == pytest.approx(0.8442, rel=1e-12)
    assert np.all(x >= np.array(box.lo)) and np.all(x < np.array(box.hi))
    assert len({tuple(p) for p in np.round(x, 9)}) == len(x)  # no atom twice


def test_order_is_z_then_y_then_x_then_basis():
    lattice = Lattice.from_density("bcc", 1.0)
    x = create_atoms(lattice, block_region(lattice, (0, 2, 0, 2, 0, 2)))
    a = lattice.constant
    np.testing.assert_allclose(x[:4], [[0, 0, 0], [0.5 * a, 0.5 * a, 0.5 * a], [a, 0, 0], [1.5 * a, 0.5 * a, 0.5 * a]])


def test_region_inside_a_larger_box_and_offset_origin():
    lattice = Lattice.from_density("sc", 1.0)
    box = block_region(lattice, (-2, 3, -2, 3, -2, 3))
    assert len(create_atoms(lattice, box)) == 125
    inner = block_region(lattice, (0, 1, 0, 1, 0, 1))  # closed region: the corners 0 and 1 both count
    assert len(create_atoms(lattice, box, inner)) == 8


def test_bad_input_is_named():
    with pytest.raises(MDInputError, match="lattice style 'hcp'"):
        Lattice.from_density("hcp", 1.0)
    with pytest.raises(MDInputError, match="density must be positive"):
        Lattice.from_density("fcc", 0.0)
    with pytest.raises(MDInputError, match="hi > lo"):
        Box((0.0, 0.0, 0.0), (1.0, -1.0, 1.0))
