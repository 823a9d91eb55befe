"""Build the files of an exported library: objects, libNAME.so and libNAME.a, with the system C compiler.

The kernels are compiled with exactly the flags of the compile cache
(c_compiler.RELEASE_FLAGS, as position-independent objects), so the exported
code is the code the Python call runs. The API layer is compiled for the
baseline instruction set (its CPU check must run on any x86-64), and the
weights image, when embedded, is assembled from an `.incbin`. The shared
library needs only libc, libm and the OpenMP runtime (none of it with
openmp=False, which keeps `#pragma omp simd` through -fopenmp-simd).
"""
from __future__ import annotations

import functools
import platform
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from tensorkiln.errors import CompileError

from .c_compiler import RELEASE_FLAGS, compiler_version, cpu_features, find_c_compiler

API_FLAGS = ("-O2", "-fPIC", "-std=c99", "-fvisibility=hidden")

# (GCC's predefined macro under -march=native, __builtin_cpu_supports name, /proc/cpuinfo flag)
CPU_FEATURES = (
    ("__SSE4_1__", "sse4.1", "sse4_1"), ("__SSE4_2__", "sse4.2", "sse4_2"), ("__POPCNT__", "popcnt", "popcnt"),
    ("__AVX__", "avx", "avx"), ("__AVX2__", "avx2", "avx2"), ("__FMA__", "fma", "fma"),
    ("__F16C__", "f16c", "f16c"), ("__BMI__", "bmi", "bmi1"), ("__BMI2__", "bmi2", "bmi2"),
    ("__MOVBE__", "movbe", "movbe"), ("__AVX512F__", "avx512f", "avx512f"),
    ("__AVX512CD__", "avx512cd", "avx512cd"), ("__AVX512BW__", "avx512bw", "avx512bw"),
    ("__AVX512DQ__", "avx512dq", "avx512dq"), ("__AVX512VL__", "avx512vl", "avx512vl"),
    ("__AVX512IFMA__", "avx512ifma", "avx512ifma"), ("__AVX512VBMI__", "avx512vbmi", "avx512vbmi"),
    ("__AVX512VBMI2__", "avx512vbmi2", "avx512_vbmi2"), ("__AVX512VNNI__", "avx512vnni", "avx512_vnni"),
    ("__AVX512BF16__", "avx512bf16", "avx512_bf16"), ("__AVX512BITALG__", "avx512bitalg", "avx512_bitalg"),
    ("__AVX512VPOPCNTDQ__", "avx512vpopcntdq", "avx512_vpopcntdq"), ("__GFNI__", "gfni", "gfni"),
    ("__VAES__", "vaes", "vaes"), ("__VPCLMULQDQ__", "vpclmulqdq", "vpclmulqdq"),
)


@dataclass(frozen=True)
class BuiltLibrary:
    """The libraries an export built, and how."""

    shared: Path
    static: Path
    compiler: str
    flags: tuple[str, ...]
    seconds: float


def compiler() -> str:
    """The C compiler command, or CompileError when there is none."""
    cc = find_c_compiler()
    if cc is None:
        raise CompileError("exporting a model needs a C compiler: install gcc or clang, or set CC")
    return cc


def kernel_flags(openmp: bool) -> tuple[str, ...]:
    """The kernels' flags: the compile cache's release flags, as objects (and without OpenMP on request)."""
    flags = tuple(f for f in RELEASE_FLAGS if f != "-shared")
    return flags if openmp else tuple("-fopenmp-simd" if f == "-fopenmp" else f for f in flags)


@functools.lru_cache(maxsize=None)
def target_cpu_checks(cc: str) -> tuple[tuple[str, str], ...]:
    """(__builtin_cpu_supports name, cpuinfo flag) of every instruction set -march=native lets the compiler use."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return ()
    done = subprocess.run([*shlex.split(cc), "-march=native", "-dM", "-E", "-x", "c", "/dev/null"],
                          capture_output=True, text=True)
    macros = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("#define ")}
    have = set(cpu_features().split())
    # a macro the compiler defines for a feature /proc/cpuinfo does not list would refuse this very machine
    return tuple((builtin, flag) for macro, builtin, flag in CPU_FEATURES if macro in macros and flag in have)


def _run(command: Sequence[str], cwd: Path, what: str, source: Path) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        first = next((line for line in done.stderr.splitlines() if "error" in line), "")
        raise CompileError(f"building the exported library failed at {what}: {first}".rstrip(": "),
                           source_path=str(source), compiler_output=done.stderr)


def build_library(directory: Path, name: str, *, openmp: bool, embedded: bool,
                  report: Callable[[str], None] = lambda text: None) -> BuiltLibrary:
    """Compile NAME_kernels.c, NAME_api.c (and NAME_weights.S) in `directory` into libNAME.so and libNAME.a;
    `report` is told each step ("compiling C 1/5: the kernels", ...)."""
    start = time.perf_counter()
    cc = compiler()
    words = shlex.split(cc)
    flags = kernel_flags(openmp)
    runtime = ("-fopenmp",) if openmp else ()
    shared, static = f"lib{name}.so", f"lib{name}.a"
    objects = [f"{name}_kernels.o", f"{name}_api.o"] + ([f"{name}_weights.o"] if embedded else [])
    steps = [
        ("the kernels", [*words, *flags, "-c", f"{name}_kernels.c", "-o", objects[0]], f"{name}_kernels.c"),
        ("the API layer", [*words, *API_FLAGS, *runtime, "-c", f"{name}_api.c", "-o", objects[1]], f"{name}_api.c"),
    ]
    if embedded:
        steps.append(("the embedded weights", [*words, "-c", f"{name}_weights.S", "-o", objects[2]],
                      f"{name}_weights.S"))
    steps.append((f"linking {shared}", [*words, "-shared", *runtime, "-o", shared, *objects, "-lm",
                                        "-Wl,--as-needed"], f"{name}_api.c"))
    steps.append((f"archiving {static}", ["ar", "rcs", static, *objects], f"{name}_api.c"))
    (directory / static).unlink(missing_ok=True)
    for k, (what, command, source) in enumerate(steps, start=1):
        report(f"compiling C {k}/{len(steps)}: {what}")
        _run(command, directory, what, directory / source)
    for obj in objects:
        (directory / obj).unlink()
    return BuiltLibrary(directory / shared, directory / static, compiler_version(cc).splitlines()[0],
                        flags, time.perf_counter() - start)


__all__ = ["BuiltLibrary", "CPU_FEATURES", "build_library", "compiler", "kernel_flags", "target_cpu_checks"]
