"""Trustworthy measurement: every candidate in a worker subprocess with a timeout.

`Measurer.measure(workload, config)` sends one request to a worker process
(worker.py: compile, check against the reference, time against the default
in alternating turns) and waits at most `timeout` seconds for its answer.
A worker that crashes (its pipe closes) or hangs (no answer in time) is
killed; that candidate is recorded as failed with the reason, and the next
request starts a fresh worker. The tuner never runs candidate code itself.
A sketch workload's kernel (kernels/sketch.py) exists only in the process
that lowered it: the first request of it to a worker carries the kernel.
"""
from __future__ import annotations

import base64
import json
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from ..kernels.sketch import sketch_kernel

STARTUP_SECONDS = 60.0  # a fresh worker imports tensorkiln and builds the default first


@dataclass
class Measurement:
    """One candidate's outcome: ok with times (seconds per call) and ratio to the default, or the error."""

    ok: bool
    seconds: float = float("inf")
    default_seconds: float = float("inf")
    ratio: float = float("inf")
    compile_seconds: float = 0.0
    error: str = ""


class Measurer:
    """A worker subprocess and the protocol with it (see the module docstring).

    timeout: seconds one candidate may take (build, check and timing); a fresh worker gets
    startup_seconds more. rounds, block_seconds: the timing (worker.py).
    command: the worker's argv (default: this Python running tensorkiln.tune.worker).
    """

    def __init__(self, timeout: float = 60.0, rounds: int = 3, block_seconds: float = 0.02,
                 command: list[str] | None = None, startup_seconds: float = STARTUP_SECONDS):
        self.timeout, self.rounds, self.block_seconds = timeout, rounds, block_seconds
        self.startup_seconds = startup_seconds
        self.command = command or [sys.executable, "-m", "tensorkiln.tune.worker"]
        self.process: subprocess.Popen | None = None
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ, TENSORKILN_VERBOSE="0")
        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        self.fresh = True
        self.kernels_sent: set[str] = set()  # sketch workloads whose kernel this worker holds

    def _kill(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
            self.process = None
            self.restarts += 1

    def _read_line(self, deadline: float) -> bytes | str:
        """One answer line, or why there is none ("timed out", "crashed (...)")."""
        stream = self.process.stdout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"timed out after {self.timeout:.0f} s"
            ready, _, _ = select.select([stream], [], [], left)
            if ready:
                line = stream.readline()
                if line:
                    return line
                try:  # the pipe closed: the worker is gone (a core dump can take a moment)
                    code = self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    code = None
                return f"crashed (exit status {code})"

    def measure(self, workload: str, config: dict | None, rounds: int | None = None,
                cutoff: float | None = None, limit: float | None = None) -> Measurement:
        """Build, check and time `config` (None: the default alone) for `workload` in the worker.

        cutoff: a candidate slower than this ratio to the default in its first round is not timed further
        (the search's best so far, with a margin: it cannot win).
        limit: the most seconds to wait for this answer, below the timeout (a budget's end: the worker
        is then stopped like a hung one, and the candidate fails)."""
        if self.process is None or self.process.poll() is not None:
            self._kill()
            self._start()
        request = {"workload": workload, "config": config, "rounds": rounds or self.rounds,
                   "block_seconds": self.block_seconds}
        if cutoff is not None:
            request["cutoff"] = cutoff
        kernel = sketch_kernel(workload) if workload.startswith("sketch:") else None
        if kernel is not None and workload not in self.kernels_sent:
            request["kernel"] = base64.b64encode(pickle.dumps(kernel)).decode()
            self.kernels_sent.add(workload)
        allowed = self.timeout + (self.startup_seconds if self.fresh else 0.0)
        stopped_early = limit is not None and limit < allowed
        if stopped_early:
            allowed = max(limit, 0.0)
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill()
            return Measurement(False, error="the measuring process died before the request")
        line = self._read_line(time.monotonic() + allowed)
        if isinstance(line, str):
            self._kill()
            if stopped_early and line.startswith("timed out"):
                return Measurement(False, error=f"stopped at the end of the budget ({allowed:.1f} s left)")
            return Measurement(False, error=f"the measuring process {line}")
        self.fresh = False
        try:
            reply = json.loads(line)
        except ValueError:
            self._kill()
            return Measurement(False, error="the measuring process answered nonsense")
        if not reply.get("ok"):
            return Measurement(False, error=str(reply.get("error", "failed")))
        return Measurement(True, float(reply["seconds"]), float(reply["default_seconds"]), float(reply["ratio"]),
                           float(reply.get("compile_seconds", 0.0)))

    def close(self) -> None:
        """Stop the worker (it also stops when its stdin closes)."""
        if self.process is not None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._kill()
            self.process = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Measurement", "Measurer"]
