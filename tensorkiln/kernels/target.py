"""What the GEMM and conv templates need to know about the CPU: vector width, cache sizes, bf16 and int8
dot products.

Read once per process from /proc/cpuinfo (the widest vector extension the
generated code can use with -march=native) and
/sys/devices/system/cpu/cpu0/cache (per-core L1d and L2, shared L3); each
value has a default for machines that expose neither. `bf16_dot`: the CPU
has AVX512-BF16 (`vdpbf16ps`) and it multiplies faster than float32 FMAs there
(bf16_dot_rate.py measures it), so the bf16 kernels use it; without it the
bf16 kernels widen bf16 to float32, and precision="bf16" mostly runs the
float32 kernels on rounded operands. TENSORKILN_NO_BF16_DOT=1 describes the
host without it (the tests run both paths on one machine). `full_rate_bytes`: an
AVX-512 CPU whose FMAs run 512-bit vectors at half the rate of 256-bit ones
(fma_width_rate.py measures it; a Zen 4) says so, for the rules that weigh
multiplications against memory traffic.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from .bf16_dot_rate import bf16_dot_pays, bf16_dot_rate, forced_choice
from .fma_width_rate import fma_full_width

_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"
DEFAULT_CACHES = {1: 32 * 1024, 2: 512 * 1024, 3: 8 * 1024 * 1024}
CACHE_LINE = 64  # bytes: every x86-64 CPU the kernels target


@dataclass(frozen=True)
class CpuTarget:
    """Vector register width in bytes, vector register count, data-cache sizes in bytes, whether
    the CPU computes bf16 dot products (AVX512-BF16), how int8 products are summed
    (`INT8_DOT_KINDS`), and whether it has AVX2 with FMA (whatever width the templates are told)."""

    vector_bytes: int
    vector_registers: int
    l1d: int
    l2: int
    l3: int
    bf16_dot: bool = False
    int8_dot: str = "portable"
    fma256: bool = False  # AVX2 and FMA: the 256-bit intrinsics of the widened bf16 tile
    # the widest vector whose FMAs issue at the full multiply-add rate where it is narrower than
    # vector_bytes (a Zen 4 runs 512-bit FMAs in two 256-bit halves: 32); 0: vector_bytes
    full_rate_bytes: int = 0

    @property
    def fma_bytes(self) -> int:
        """Bytes of the widest vector whose FMAs run at the full multiply-add rate (fma_width_rate.py)."""
        return self.full_rate_bytes or self.vector_bytes


# How the u8 x s8 GEMM (templates/gemm_u8s8.py) and the direct convolutions sum byte products, best
# first: vpdpbusd (AVX512-VNNI), bytes widened to 16 bits for vpmaddwd (AVX-512BW, or AVX2 in 256-bit
# vectors: templates/int8_avx2.py), or plain C.
INT8_DOT_KINDS = ("vnni", "avx512bw", "avx2", "portable")


def int8_dot_kind(flags: set[str]) -> str:
    """The best int8 dot product the CPU flags allow; TENSORKILN_INT8_DOT forces a slower one (tests)."""
    best = "vnni" if {"avx512_vnni", "avx512bw"} <= flags else "avx512bw" if "avx512bw" in flags else \
        "avx2" if "avx2" in flags else "portable"
    forced = os.environ.get("TENSORKILN_INT8_DOT")
    if forced in INT8_DOT_KINDS and INT8_DOT_KINDS.index(forced) >= INT8_DOT_KINDS.index(best):
        return forced
    return best


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _cache_entries(root: str) -> list[dict[str, str]]:
    """cpu0's cache descriptions in sysfs (index0, index1, ...): each entry's files that could be read,
    as stripped text ("level", "type", "size", "ways_of_associativity")."""
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith("index"))
    except OSError:
        return []
    entries = []
    for name in names:
        entry = {}
        for field in ("level", "type", "size", "ways_of_associativity"):
            try:
                with open(os.path.join(root, name, field)) as f:
                    entry[field] = f.read().strip()
            except OSError:
                pass
        entries.append(entry)
    return entries


def read_cache_sizes(root: str = _CACHE_DIR) -> dict[int, int]:
    """{level: bytes} of the data/unified caches of cpu0, defaults where sysfs says nothing."""
    sizes = dict(DEFAULT_CACHES)
    for entry in _cache_entries(root):
        try:
            level, size = int(entry["level"]), _parse_size(entry["size"])
        except (KeyError, ValueError):
            continue
        if entry.get("type") in ("Data", "Unified") and level in sizes and size > 0:
            sizes[level] = size
    return sizes


DEFAULT_L2_WAYS = 8  # Zen 2-5 and most Intel cores' L2 have 8 ways or more (more only helps)


@functools.lru_cache(maxsize=None)
def l2_ways(root: str = _CACHE_DIR) -> int:
    """The L2 cache's associativity from sysfs (DEFAULT_L2_WAYS where it says nothing): how many lines
    of one set it holds, which decides whether rows of a matrix at a power-of-two stride fit together."""
    for entry in _cache_entries(root):
        if entry.get("level") == "2" and entry.get("ways_of_associativity", "").isdigit():
            ways = int(entry["ways_of_associativity"])
            if ways > 0:
                return ways
    return DEFAULT_L2_WAYS


@functools.lru_cache(maxsize=None)
def cpuinfo_fields(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's fields of `cpuinfo` ("flags", "vendor_id", "model name", "cpu family", "model",
    ...), their values stripped; empty where the file cannot be read."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough: a VM's processors are alike
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _cpu_flags() -> set[str]:
    return set(cpuinfo_fields().get("flags", "").split())


@functools.lru_cache(maxsize=None)
def cpu_target() -> CpuTarget:
    """The host CPU (the generated code is compiled with -march=native for it)."""
    flags = _cpu_flags()
    forced = os.environ.get("TENSORKILN_VECTOR_BYTES")  # for tests of other widths
    if forced and forced.isdigit():
        width, regs = int(forced), (32 if int(forced) >= 64 else 16)
    elif "avx512f" in flags:
        width, regs = 64, 32
    elif "avx2" in flags and "fma" in flags:
        width, regs = 32, 16
    else:
        width, regs = 16, 16
    caches = read_cache_sizes()
    bf16_dot = has_bf16_dot_instruction(flags, width) and bf16_dot_chosen()
    # a width forced for tests is taken as running at full rate; a real 512-bit one is measured
    halves = width >= 64 and not forced and not fma_full_width()
    return CpuTarget(width, regs, caches[1], caches[2], caches[3], bf16_dot, int8_dot_kind(flags),
                     {"avx2", "fma"} <= flags, width // 2 if halves else 0)


def has_bf16_dot_instruction(flags: set[str], vector_bytes: int) -> bool:
    """AVX512-BF16 with 512-bit vectors, unless TENSORKILN_NO_BF16_DOT=1 describes a CPU without it."""
    return "avx512_bf16" in flags and vector_bytes >= 64 and \
        os.environ.get("TENSORKILN_NO_BF16_DOT", "") in ("", "0")


def bf16_dot_chosen() -> bool:
    """On a CPU with AVX512-BF16: whether the bf16 kernels use it (TENSORKILN_BF16_DOT, else measured)."""
    forced = forced_choice()
    return forced if forced is not None else bf16_dot_pays(bf16_dot_rate())


def cpu_vendor() -> str:
    """The CPU's vendor string from /proc/cpuinfo ("AuthenticAMD", "GenuineIntel"; "" where it says none):
    for the few choices whose measured effect differs between vendors' cache designs."""
    return cpuinfo_fields().get("vendor_id", "")


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where it says none); keys tuning records."""
    return " ".join(cpuinfo_fields().get("model name", "").split()) or "unknown CPU"


def cpu_family_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """"family F model M" from `cpuinfo` ("" where it says none): what tells one generation from another
    where a hypervisor names every CPU the same ("AMD EPYC": family 25 model 1 is a Zen 3, model 17 a Zen 4)."""
    fields = cpuinfo_fields(cpuinfo)
    if "cpu family" not in fields or "model" not in fields:
        return ""
    return f"family {fields['cpu family']} model {fields['model']}"


def cpu_description() -> str:
    """The CPU as figures should name it: model name, family and model, the vector ISA the kernels use and
    the data caches (e.g. "AMD EPYC (family 25 model 1), avx2+fma, L1d 32 KiB, L2 512 KiB, L3 32 MiB"; a Zen 4:
    "avx512+vnni+bf16+fma at 256 bits")."""
    target = cpu_target()
    isa = {64: "avx512", 32: "avx2+fma" if target.fma256 else "avx2"}.get(target.vector_bytes, "sse")
    extras = [name for name, present in (("vnni", target.int8_dot == "vnni"), ("bf16", target.bf16_dot)) if present]
    if target.full_rate_bytes:  # 512-bit FMAs in halves (a Zen 4): the FMA rate of the narrower vectors
        extras.append(f"fma at {target.full_rate_bytes * 8} bits")
    if not target.bf16_dot and has_bf16_dot_instruction(_cpu_flags(), target.vector_bytes):
        rate = bf16_dot_rate()
        extras.append(f"bf16 unused ({rate:.2f}x the FMA rate)" if rate is not None else "bf16 unused")
    family = cpu_family_model()

    def size(n: int) -> str:
        return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"
    return (f"{cpu_model_name()}{f' ({family})' if family else ''}, {'+'.join([isa] + extras)}, "
            f"L1d {size(target.l1d)}, L2 {size(target.l2)}, L3 {size(target.l3)}")
