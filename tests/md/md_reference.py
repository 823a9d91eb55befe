"""Independent numpy computations the MD tests compare against: all pairs by brute force, no cells."""
from __future__ import annotations

import numpy as np


def minimum_image(delta: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return delta - lengths * np.round(delta / lengths)


def pair_table(x: np.ndarray, lengths: np.ndarray, cutoff: float) -> set[tuple[int, int]]:
    """Every pair i < j closer than `cutoff` (minimum image)."""
    d = minimum_image(x[:, None, :] - x[None, :, :], lengths)
    r2 = np.sum(d * d, axis=-1)
    i, j = np.nonzero(np.triu(r2 < cutoff * cutoff, k=1))
    return set(zip(i.tolist(), j.tolist()))


def lj_brute_force(x: np.ndarray, lengths: np.ndarray, epsilon: float, sigma: float, cutoff: float):
    """Forces [n, 3], total pair energy and virial sum(r . f) of lj/cut over all pairs."""
    d = minimum_image(x[:, None, :] - x[None, :, :], lengths)
    r2 = np.sum(d * d, axis=-1)
    np.fill_diagonal(r2, np.inf)
    inside = r2 < cutoff * cutoff
    sr6 = np.where(inside, (sigma * sigma / r2) ** 3, 0.0)
    energy_pairs = 4.0 * epsilon * (sr6 * sr6 - sr6)
    fpair = np.where(inside, 24.0 * epsilon * (2.0 * sr6 * sr6 - sr6) / r2, 0.0)
    forces = np.sum(fpair[:, :, None] * d, axis=1)
    return forces, 0.5 * energy_pairs.sum(), 0.5 * np.sum(fpair * np.where(inside, r2, 0.0))


def thermo_step0(x, v, mass, lengths, epsilon, sigma, cutoff):
    """(Temp, E_pair, TotEng, Press) as LAMMPS defines them, per atom where LAMMPS normalizes."""
    n = len(x)
    dof = 3 * n - 3
    _, energy, virial = lj_brute_force(x, lengths, epsilon, sigma, cutoff)
    mvv = mass * np.sum(v * v)
    temp = mvv / dof
    volume = np.prod(lengths)
    return temp, energy / n, (energy + 0.5 * mvv) / n, (mvv + virial) / (3.0 * volume)
