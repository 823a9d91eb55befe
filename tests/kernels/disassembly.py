"""Reading a compiled library's machine code back: the basic block where a kernel spends its time."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tensorkiln.kernels.target import cpu_target

# Reading machine code back needs objdump, and the checks of vector code a CPU with 256-bit vectors or wider.
needs_vector_disassembly = pytest.mark.skipif(
    shutil.which("objdump") is None or cpu_target().vector_bytes < 32,
    reason="needs objdump and a CPU with AVX2 or wider vectors")


def hottest_block(library_path: str, instruction: str) -> list[str]:
    """The basic block of the library (objdump lines) with the most `instruction`s, e.g. "vfmadd"."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library_path],
                          capture_output=True, text=True).stdout
    lines = text.splitlines()
    targets = {line.split()[-2] for line in lines if "\tj" in line and len(line.split()) >= 3}
    blocks, current = [], []  # basic blocks: split after jumps and before jump targets
    for line in lines:
        address = line.split(":")[0].strip()
        if address in targets and current:
            blocks.append(current)
            current = []
        current.append(line)
        if "\tj" in line:
            blocks.append(current)
            current = []
    return max(blocks, key=lambda block: sum(instruction in line for line in block))
