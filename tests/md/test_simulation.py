"""Whole runs: thermo at step 0 against numpy, energy conservation, rebuild policies, the skin warning."""
from __future__ import annotations

import numpy as np
import pytest

from md_reference import thermo_step0
from md_systems import melt
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.simulation import DangerousBuildWarning, NeighborSettings, Simulation


@pytest.mark.parametrize("style, density, cutoff, threads", [("fcc", 0.8442, 2.5, 1), ("bcc", 0.7, 2.2, 2),
                                                              ("sc", 1.1, 1.8, 3)])
def test_step0_thermo_matches_numpy(style, density, cutoff, threads):
    system = melt(style, density, cells=5)
    sim = Simulation(system, LJCut(cutoff=cutoff), NeighborSettings(skin=0.3), threads=threads)
    row = sim.setup_run()
    temp, e_pair, tot_eng, press = thermo_step0(system.positions, system.velocities, 1.0, system.box.lengths,
                                                1.0, 1.0, cutoff)
    assert (row.step, row.e_mol) == (0, 0.0)
    for got, want in [(row.temp, temp), (row.e_pair, e_pair), (row.tot_eng, tot_eng), (row.press, press)]:
        assert got == pytest.approx(want, rel=1e-10)


def test_energy_is_conserved():
    # With the energy shifted to 0 at the cutoff, velocity Verlet's energy error is O(dt^2): halving the
    # step quarters it. (Unshifted, each pair crossing the cutoff jumps the energy: a drift that does
    # not shrink with dt, ~2e-3 here, as in LAMMPS.)
    drifts = []
    for dt in (0.004, 0.002):
        sim = Simulation(melt(cells=4), LJCut(cutoff=2.5, shift=True), NeighborSettings(skin=0.3, every=1),
                         dt=dt, threads=2)
        result = sim.run(int(0.4 / dt), thermo_every=int(0.4 / dt) // 4)
        energies = np.array([row.tot_eng for row in result.rows])
        assert len(energies) == 5 and result.builds > 0 and result.dangerous_builds == 0
        drifts.append(np.max(np.abs(energies - energies[0])) / abs(energies[0]))
        # the melt happened: kinetic energy went into the potential
        assert result.rows[-1].temp < 0.9 * result.rows[0].temp
    assert drifts[0] < 2e-4 and 2.5 < drifts[0] / drifts[1] < 6, drifts


def test_check_yes_gives_the_trajectory_of_a_rebuild_every_step():
    every_step = Simulation(melt(cells=4), LJCut(), NeighborSettings(skin=0.3, every=1, check=False), threads=1)
    checked = Simulation(melt(cells=4), LJCut(), NeighborSettings(skin=0.3, every=1, check=True), threads=1)
    a, b = every_step.run(60), checked.run(60)
    assert b.builds < a.builds == 60
    lengths = every_step.system.box.lengths
    apart = checked.positions() - every_step.positions()
    np.testing.assert_allclose(apart - lengths * np.round(apart / lengths), 0.0, atol=1e-9)  # up to the wrap
    assert b.rows[-1].tot_eng == pytest.approx(a.rows[-1].tot_eng, rel=1e-10)


@pytest.mark.parametrize("check", [False, True])
def test_too_small_skin_is_warned(check):
    sim = Simulation(melt(cells=4, temperature=3.0), LJCut(), NeighborSettings(skin=0.05, every=20, check=check),
                     threads=1)
    with pytest.warns(DangerousBuildWarning, match="more than half the skin"):
        result = sim.run(40)
    assert result.builds == result.dangerous_builds == 2


def test_wide_skin_or_checking_every_step_is_not_dangerous():
    for settings in (NeighborSettings(skin=0.8, every=10, check=False), NeighborSettings(skin=0.05, every=1)):
        result = Simulation(melt(cells=4), LJCut(), settings, threads=1).run(40)
        assert result.builds > 0 and result.dangerous_builds == 0


def test_thermo_rows_at_first_interval_and_last_step():
    sim = Simulation(melt(cells=4), LJCut(), threads=1)
    lines: list[str] = []
    result = sim.run(25, thermo_every=10, out=lines.append)
    assert [row.step for row in result.rows] == [0, 10, 20, 25]
    assert lines[0].split() == ["Step", "Temp", "E_pair", "E_mol", "TotEng", "Press"]
    assert lines[-1].startswith("Loop time of ") and lines[-1].endswith(" on 1 procs for 25 steps with 256 atoms")
    # a second run continues the step count
    assert [row.step for row in sim.run(5).rows] == [25, 30]
