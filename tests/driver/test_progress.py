"""Progress reports on long work (tensorkiln/driver/progress.py): stderr past a delay, the logger always."""
from __future__ import annotations

import io
import logging
import time

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.driver.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_quick_work_prints_nothing_but_logs_every_stage(monkeypatch, caplog):
    monkeypatch.delenv("TENSORKILN_VERBOSE", raising=False)
    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="tensorkiln"):
        with Progress("compiling f", stream=stream, delay=5.0) as progress:
            progress.stage("optimizing")
            progress.stage("compiling C", total=2)
            progress.step()
    assert stream.getvalue() == ""
    messages = [r.getMessage() for r in caplog.records if r.name == "tensorkiln"]
    assert messages[0].startswith("compiling f: optimizing (") and "compiling C 1/2" in messages[2]
    assert messages[-1].startswith("compiling f: done")


def test_long_work_prints_one_line_per_stage(monkeypatch):
    monkeypatch.delenv("TENSORKILN_VERBOSE", raising=False)
    stream = io.StringIO()
    with Progress("compiling g", stream=stream, delay=0.05) as progress:
        progress.stage("optimizing")
        time.sleep(0.3)  # past the delay: the current stage is shown
        progress.stage("compiling C", total=3)
        progress.step()  # a step is not a new line in a log
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("tensorkiln: compiling g: optimizing (")
    assert lines[1].startswith("tensorkiln: compiling g: compiling C 0/3 (")
    assert lines[2].startswith("tensorkiln: compiling g: done (") and len(lines) == 3


def test_a_terminal_line_is_rewritten_in_place(monkeypatch):
    monkeypatch.setenv("TENSORKILN_VERBOSE", "2")  # from the start, whatever the delay
    stream = Terminal()
    with Progress("bench", stream=stream, delay=60.0) as progress:
        time.sleep(0.1)
        progress.stage("measuring")
        progress.step()
    text = stream.getvalue()
    assert "\r\033[K" in text and "\n" not in text[:-1] and text.endswith("\n")
    assert "tensorkiln: bench: measuring 1 (" in text


def test_verbose_zero_silences_stderr_not_the_logger(monkeypatch, caplog):
    monkeypatch.setenv("TENSORKILN_VERBOSE", "0")
    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="tensorkiln"):
        with Progress("compiling h", stream=stream, delay=0.0) as progress:
            progress.stage("lowering 3 kernels")
            time.sleep(0.05)
    assert stream.getvalue() == ""
    assert any("lowering 3 kernels" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("verbose", ["2", "0"])
def test_a_compile_reports_its_stages(monkeypatch, capfd, caplog, verbose):
    monkeypatch.setenv("TENSORKILN_VERBOSE", verbose)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    with caplog.at_level(logging.INFO, logger="tensorkiln"):
        tk.jit(lambda a: (a * 1.5).tanh().sum(1))(x)
    err = capfd.readouterr().err
    logged = " | ".join(r.getMessage() for r in caplog.records if r.name == "tensorkiln")
    assert "optimizing" in logged and "done" in logged
    if verbose == "2":
        assert "tensorkiln: compiling <lambda>: optimizing" in err
    else:
        assert "tensorkiln:" not in err
