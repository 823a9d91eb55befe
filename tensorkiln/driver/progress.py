"""Signs of life on long work: one line per stage on stderr once the work has taken about a second.

    with Progress("compiling resnet18") as progress:
        progress.stage("optimizing")
        progress.stage("lowering 52 kernels")
        progress.stage("compiling C", total=3)   # a stage of steps: "compiling C 1/3", ...
        progress.step()

Work that ends within DELAY_SECONDS prints nothing: a fast compile stays
silent. Past it, the current stage and every later one print as
`tensorkiln: compiling resnet18: lowering 52 kernels (1.2 s)`; on a terminal
the line is rewritten in place (and its clock ticks while a stage runs), in a
log file each stage is a line of its own. TENSORKILN_VERBOSE=0 silences the
lines, TENSORKILN_VERBOSE=2 prints them from the start. Whatever the
setting, the same events go to `logging.getLogger("tensorkiln")` at INFO
level, for programs that want them in their own logs.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Optional, TextIO

DELAY_SECONDS = 1.0
TICK_SECONDS = 0.5  # how often a terminal line's clock is redrawn during a long stage

logger = logging.getLogger("tensorkiln")


def verbosity() -> int:
    """TENSORKILN_VERBOSE: 0 silent, 1 (default) stages of work past a second, 2 stages of all work."""
    text = os.environ.get("TENSORKILN_VERBOSE", "1").strip()
    try:
        return max(int(text), 0)
    except ValueError:
        return 1


class Progress:
    """The stages of one piece of work, reported to stderr (past a delay) and to the "tensorkiln" logger."""

    def __init__(self, title: str, stream: Optional[TextIO] = None, delay: float = DELAY_SECONDS):
        self.title = title
        self._stream = stream if stream is not None else sys.stderr
        level = verbosity()
        self._enabled = level > 0
        self._terminal = bool(getattr(self._stream, "isatty", lambda: False)())
        self._start = time.perf_counter()
        self._text = "starting"
        self._step, self._total = 0, 0
        self._shown = False
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._clock: Optional[threading.Thread] = None
        if self._enabled:
            self._clock = threading.Thread(target=self._watch, args=(0.0 if level >= 2 else delay,),
                                           name="tensorkiln-progress", daemon=True)
            self._clock.start()

    # ---- reporting ----------------------------------------------------------------------------
    def stage(self, text: str, total: int = 0) -> None:
        """A new stage begins (with `total` steps to count, when it has them)."""
        with self._lock:
            self._text, self._step, self._total = text, 0, total
            self._report(new_stage=True)

    def step(self, count: int = 1) -> None:
        """`count` more steps of the current stage are done."""
        with self._lock:
            self._step = min(self._step + count, self._total) if self._total else self._step + count
            self._report(new_stage=False)

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def close(self) -> None:
        """The work is done: a shown report ends with its total time."""
        with self._lock:
            if self._finished.is_set():
                return
            self._finished.set()
            logger.info("%s: done (%.1f s)", self.title, self.elapsed())
            if self._shown:
                self._write(f"done ({self.elapsed():.1f} s)", final=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- output -------------------------------------------------------------------------------
    def _line(self) -> str:
        steps = f" {self._step}/{self._total}" if self._total else (f" {self._step}" if self._step else "")
        return f"{self._text}{steps} ({self.elapsed():.1f} s)"

    def _report(self, new_stage: bool) -> None:
        """Log the event; print it when the report is shown (a step prints only on a terminal)."""
        line = self._line()
        logger.info("%s: %s", self.title, line)
        if self._shown and (new_stage or self._terminal) and not self._finished.is_set():
            self._write(line)

    def _write(self, text: str, final: bool = False) -> None:
        if not self._enabled:
            return
        line = f"tensorkiln: {self.title}: {text}"
        try:
            if self._terminal:
                self._stream.write("\r\033[K" + line + ("\n" if final else ""))
            else:
                self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not fail the work
            self._enabled = False

    def _watch(self, delay: float) -> None:
        """Show the report once the work outlasts `delay`; on a terminal, keep its clock ticking."""
        if self._finished.wait(delay):
            return
        with self._lock:
            if self._finished.is_set():
                return
            self._shown = True
            self._write(self._line())
        while self._terminal and not self._finished.wait(TICK_SECONDS):
            with self._lock:
                if not self._finished.is_set():
                    self._write(self._line())


__all__ = ["DELAY_SECONDS", "Progress", "logger", "verbosity"]
