"""Run every benchmark script in this folder, one after another (`make bench`)."""
from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ["compiled_vs_numpy.py", "graph_optimizer.py", "training.py", "kernels.py", "accel.py"]

if __name__ == "__main__":
    status = 0
    for script in SCRIPTS:
        path = os.path.join(HERE, script)
        if not os.path.exists(path):
            continue
        print(f"\n=== {script}")
        status |= subprocess.call([sys.executable, path])
    sys.exit(status)
