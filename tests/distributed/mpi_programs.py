"""Running the programs in programs/ on several ranks, under a timeout, for the tests.

The tests skip, saying why, only where MPI is missing (mpi4py or mpiexec);
`make test` installs both ('.[dev]' includes the mpi extra).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 180  # seconds for one launch, compiles included; a hang fails the test instead of the suite


def mpi_missing() -> str | None:
    """Why MPI cannot run here, or None."""
    try:
        import mpi4py  # noqa: F401
    except ImportError as err:
        return f"mpi4py is not installed ({err}); pip install 'tensorkiln[mpi]'"
    from tensorkiln.distributed.launch import find_mpiexec
    from tensorkiln.errors import DistributedError
    try:
        find_mpiexec()
    except DistributedError as err:
        return str(err)
    return None


needs_mpi = pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))


def environment() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def launch(ranks: int, program: str, *args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    """`tensorkiln launch -n ranks programs/<program> args...`, its output captured."""
    command = [sys.executable, "-m", "tensorkiln.tools.cli", "launch", "-n", str(ranks), "--timeout", str(timeout),
               str(PROGRAMS / program), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30, env=environment(),
                          cwd=ROOT)


def assert_ok(result: subprocess.CompletedProcess, name: str, ranks: int) -> None:
    """Every rank printed 'OK <name>' and the launch succeeded."""
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    for rank in range(ranks):
        assert f"OK {name} rank {rank}" in result.stdout, output[-6000:]
