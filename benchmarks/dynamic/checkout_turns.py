"""The parent side of a comparison of tensorkiln checkouts in turns (attention_checkouts.py,
models_checkouts.py): one child process per checkout, each importing its own tree, asked in turn
for blocks of calls.

A child prints "ready" once it has compiled, then answers each line "KEY CALLS" with the seconds per
call of CALLS calls of what KEY names (a model, a length). The parent times a block of about
`block_seconds` of calls of each checkout, the order reversed every round, and prints each
checkout's median and the median of its per-round ratios to the first checkout's.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Iterable

import numpy as np


def start_children(checkouts: str, script: str, child_args: list[str]) -> dict[str, subprocess.Popen]:
    """One serving child of `script` per "name=path" in `checkouts`, with the path first on PYTHONPATH."""
    children = {}
    for spec in checkouts.split(","):
        name, tree = spec.split("=", 1)
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        children[name] = subprocess.Popen([sys.executable, os.path.abspath(script), "--serve", *child_args],
                                          env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                          cwd=tree)
        if children[name].stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name} ({tree}): the child did not start")
    return children


def compare_in_turns(children: dict[str, subprocess.Popen], keys: Iterable[str], rounds: int,
                     block_seconds: float, label: str = "{key}") -> None:
    """For each key, `rounds` rounds of one block per checkout in alternating order; print the medians
    and each checkout's median ratio to the first. The children are closed at the end."""
    def ask(name: str, key: str, calls: int) -> float:
        children[name].stdin.write(f"{key} {calls}\n")
        children[name].stdin.flush()
        return float(children[name].stdout.readline())

    names = list(children)
    try:
        for key in keys:
            calls = max(1, int(block_seconds / min(ask(name, key, 1) for name in names)))
            times: dict[str, list[float]] = {name: [] for name in names}
            for round_index in range(rounds):
                for name in names if round_index % 2 == 0 else names[::-1]:
                    time.sleep(0.05)
                    times[name].append(ask(name, key, calls))
            for name in names:
                ratio = float(np.median([a / b for a, b in zip(times[name], times[names[0]])]))
                print(f"{label.format(key=key)} {name:>8}: {np.median(times[name]) * 1e3:8.3f} ms  "
                      f"{name} / {names[0]} {ratio:.3f}")
    finally:
        for child in children.values():
            child.stdin.close()
            child.wait()
