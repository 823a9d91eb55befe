"""Prints the ONNX conformance counts (passed / failed / unsupported / known skips) after the run."""
from __future__ import annotations

from collections import Counter


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts: dict[str, Counter] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if "test_onnx_conformance.py::" not in nodeid or getattr(report, "when", "call") not in ("call", "setup"):
                continue
            if outcome == "passed" and report.when != "call":
                continue
            kind = "compiled" if "test_conformance_compiled" in nodeid else "interpreter"
            category = outcome
            if outcome == "skipped":
                category = "known skips" if "known:" in _reason(report) else "unsupported"
            counts.setdefault(kind, Counter())[category] += 1
    if not counts:
        return
    terminalreporter.section("ONNX conformance")
    for kind in ("interpreter", "compiled"):
        c = counts.get(kind)
        if c:
            total = sum(c.values())
            terminalreporter.write_line(
                f"{kind:<12} {total} cases: {c['passed']} passed, {c['failed'] + c['error']} failed, "
                f"{c['unsupported']} unsupported, {c['known skips']} known skips")
