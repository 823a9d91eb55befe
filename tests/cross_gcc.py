"""C compiled with GCC for a CPU this host need not be (-march=CPU): code that runs only on such a CPU
(AVX-512, AVX512-BF16, VNNI) is at least built, and its assembly read, on every machine."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def gcc_for(cpu: str, text: str, folder: Path, *flags: str, assembly: bool = False) -> str:
    """Compile `text` with `gcc -march=<cpu> -std=c99 -fopenmp <flags>`; the assembly where `assembly`, else
    "" (an object file). Skipped without gcc or where this gcc does not know `cpu`; any other error fails."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    source = folder / f"{cpu}.c"
    source.write_text(text)
    output = ["-S", "-o", "-"] if assembly else ["-c", "-o", str(folder / f"{cpu}.o")]
    done = subprocess.run(["gcc", f"-march={cpu}", "-std=c99", "-fopenmp", *flags, *output, str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0 and "bad value" in done.stderr and cpu in done.stderr:
        pytest.skip(f"this gcc cannot target {cpu}")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
