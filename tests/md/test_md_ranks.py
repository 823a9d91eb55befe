"""Decomposed runs on 2-4 MPI ranks, through `tensorkiln launch` under a timeout.

Skips, saying why, where MPI (mpi4py or mpiexec) is missing.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "distributed"))
from mpi_programs import ROOT, TIMEOUT, environment, needs_mpi  # noqa: E402
from tensorkiln.md.in_lj import in_lj  # noqa: E402

pytestmark = needs_mpi

IN_SMALL = in_lj(cells=(9, 7, 6), every=20, thermo=25, run=100)
ROW = re.compile(r"^\s*(\d+)((?:\s+-?[\d.e+-]+){5})\s*$")


def _run(*program: str, ranks: int = 0, log_dir: Path | None = None, fails: bool = False):
    """`tensorkiln launch -n RANKS [--log-dir DIR] -- PROGRAM...` (or PROGRAM itself without ranks); its
    output."""
    tensorkiln = [sys.executable, "-m", "tensorkiln.tools.cli"]
    if ranks:
        logs = ["--log-dir", str(log_dir)] if log_dir else []
        command = [*tensorkiln, "launch", "-n", str(ranks), "--timeout", str(TIMEOUT), *logs, "--", *program]
    else:
        command = [*tensorkiln, *program[1:]] if program[0] == "tensorkiln" else [sys.executable, *program]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT + 30, env=environment(),
                            cwd=ROOT)
    if fails:
        assert result.returncode != 0, result.stdout[-3000:]
        return result.stdout + result.stderr
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return result.stdout


def _table(output: str) -> dict[int, list[float]]:
    """Thermo rows by step."""
    rows = {}
    for line in output.splitlines():
        match = ROW.match(line)
        if match:
            rows[int(match.group(1))] = [float(v) for v in match.group(2).split()]
    return rows


@pytest.mark.parametrize("ranks", [2, 3])
def test_md_command_on_ranks_prints_the_one_rank_table(tmp_path, ranks):
    script = tmp_path / "in.small"
    script.write_text(IN_SMALL)
    one = _run("tensorkiln", "md", str(script), "--threads", "1")
    logs = tmp_path / "logs"
    _run("tensorkiln", "md", str(script), ranks=ranks, log_dir=logs)
    several = (logs / "rank0.out").read_text()  # rank 0 alone prints
    last = logs / f"rank{ranks - 1}.out"
    assert not last.exists() or last.read_text() == ""
    table_one, table_several = _table(one), _table(several)
    assert sorted(table_one) == sorted(table_several) == [0, 25, 50, 75, 100]
    for step, values in table_one.items():
        # printed with 8 significant digits: step 0 agrees to the last one; later rows to the order of the sums
        tolerance = 1e-10 if step == 0 else 1e-6
        assert table_several[step] == pytest.approx(values, rel=tolerance, abs=1e-7), step
    assert re.search(rf"Loop time of [\d.e+-]+ on {ranks} procs for 100 steps with 1512 atoms", several)


@pytest.mark.parametrize("ranks, cells, rebuild, list_kind", [(2, (9, 6, 5), "every-5", "full"),
                                                              (4, (8, 8, 5), "check", "half")])
def test_pairs_forces_and_trajectory_on_ranks_match_one_process(ranks, cells, rebuild, list_kind):
    output = _run(str(HERE / "programs" / "decomposed_run.py"), *map(str, cells), rebuild, list_kind, ranks=ranks)
    for rank in range(ranks):
        assert f"OK decomposed_run rank {rank}" in output, output[-4000:]


def test_too_many_ranks_for_the_box_is_an_error_on_every_rank(tmp_path):
    script = tmp_path / "in.tiny"
    script.write_text(in_lj(cells=(4, 4, 4), every=20, thermo=25, run=100))
    output = _run("tensorkiln", "md", str(script), ranks=3, fails=True)
    assert "in.tiny:15: run 100" in output  # the script's line
    assert "3 ranks as a 1x1x3 grid make sub-boxes 2.23946 wide along z, narrower than the neighbour cutoff 2.8" \
        in output
