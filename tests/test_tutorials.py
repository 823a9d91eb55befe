"""The numbered tutorials in examples/ run and finish without error."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize("script", ["01_eager.py", "02_jit.py", "03_explain.py"])
def test_tutorial_runs(script):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, script)], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout
