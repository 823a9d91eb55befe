"""LAMMPS's Park-Miller generator (RanPark) and its per-atom reset from coordinates.

`velocity all create T SEED loop geom` seeds one generator per atom from a
hash of the user's seed and the atom's coordinates, so every atom gets the same
velocity however atoms are ordered or distributed over processes. This module
reproduces that bit for bit, vectorized over atoms:

- `reset(seed, coord)`: Jenkins' one-at-a-time hash over the 4 bytes of the
  int seed and the 24 bytes of the three doubles (each byte read as a *signed*
  char, as the C code does on x86), masked to 27 bits (0 becomes 1), then 5
  draws to warm up;
- `uniform()`: the minimal-standard Park-Miller step, seed * 16807 mod (2^31 - 1)
  by Schrage's method, returning seed / (2^31 - 1).
"""
from __future__ import annotations

import numpy as np

IA, IM, IQ, IR = 16807, 2147483647, 127773, 2836
AM = 1.0 / IM
WARMUP_DRAWS = 5
SEED_MASK = 0x7FFFFFF  # 27 bits, as LAMMPS keeps them


def _one_at_a_time(hash_: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Feed the bytes `data` (shape [n, k], read as signed chars) into the uint32 hashes `hash_`."""
    signed = data.view(np.int8).astype(np.int64).astype(np.uint32)  # sign-extended, as `hash += char`
    for k in range(data.shape[1]):
        hash_ = hash_ + signed[:, k]
        hash_ = hash_ + (hash_ << np.uint32(10))
        hash_ = hash_ ^ (hash_ >> np.uint32(6))
    return hash_


def geom_seeds(seed: int, coords: np.ndarray) -> np.ndarray:
    """The generator state RanPark::reset(seed, coord) leaves for each row of `coords` (before warm-up)."""
    coords = np.ascontiguousarray(coords, dtype="<f8").reshape(-1, 3)
    n = coords.shape[0]
    seed_bytes = np.broadcast_to(np.frombuffer(np.int32(seed).astype("<i4").tobytes(), np.uint8), (n, 4))
    with np.errstate(over="ignore"):
        hash_ = np.zeros(n, np.uint32)
        hash_ = _one_at_a_time(hash_, np.ascontiguousarray(seed_bytes))
        hash_ = _one_at_a_time(hash_, coords.view(np.uint8).reshape(n, 24))
        hash_ = hash_ + (hash_ << np.uint32(3))
        hash_ = hash_ ^ (hash_ >> np.uint32(11))
        hash_ = hash_ + (hash_ << np.uint32(15))
    state = (hash_ & np.uint32(SEED_MASK)).astype(np.int64)
    state[state == 0] = 1
    return state


class ParkMiller:
    """Independent Park-Miller generators, one per element of `state` (int64 array, 1 <= s < 2^31 - 1)."""

    def __init__(self, state: np.ndarray):
        self.state = np.asarray(state, dtype=np.int64).copy()
        if np.any(self.state <= 0):
            raise ValueError("Park-Miller seeds must be positive")

    @classmethod
    def from_geometry(cls, seed: int, coords: np.ndarray) -> "ParkMiller":
        """Generators reset from `seed` and each atom's coordinates, warmed up as LAMMPS does."""
        generators = cls(geom_seeds(seed, coords))
        for _ in range(WARMUP_DRAWS):
            generators.uniform()
        return generators

    def uniform(self) -> np.ndarray:
        """One draw in (0, 1) from every generator."""
        k = self.state // IQ
        s = IA * (self.state - k * IQ) - IR * k
        s = np.where(s < 0, s + IM, s)
        self.state = s
        return AM * s.astype(np.float64)
