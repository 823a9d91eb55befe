"""The BLIS GEMM's search space: register tile, cache blocks and the threads' cut, around the analytic blocking.

Knobs (gemm.py's `GemmBlocking`):

- `mr` x `nr`: the register tile, nr whole vectors (1-4), mr rows, as many as
  leave the vector registers room for B's vectors and one broadcast;
- `kc`: the depth block (B's micro-panel in L1 or L2), 32..1024 in steps;
- `mc`: the rows of A's block (L2), a multiple of mr;
- `nc`: the columns of B's block (L3), a multiple of nr;
- `split`: how the threads cut one matrix ("auto": gemm_thread_split's rule);
- `ku`: the micro-kernel's depth loop unrolled 1, 2, 4 or 8 steps at a time;
- `pf`: software prefetch of B's micro-panel 0 (none), 4 ... 32 depth steps ahead;
- `ksplit`: the depth cut for the threads, 0 (the rule), 1 (never) or 2-8 chunks, searched
  only for a tall K (K >= max(M, N)) of an operand not given in panels.

`gemm_bf16` has its own micro-kernel: its `ku`, `pf` and `ksplit` stay at their neutral values.

A B or A given in panels keeps its tile (only the blocks and the cut move).
Every list includes the analytic choice, and `gemm.blocking_legal` is the rule
both here and when a record is read back.

The cost model's features (`gemm_features`) describe what the knobs do to
the loop nest: the tile's arithmetic intensity, the bytes each block puts in
L1, L2 and L3 as a fraction of them, the padding wasted at the matrix's
edges, the blocks per dimension, the tasks per thread, and whether B is
packed from its transpose (`bt=1`: a gather per panel row).
"""
from __future__ import annotations

import math

from ...loops.types import itemsize
from ..knob_space import Config, KnobSpace
from ..schedule_defaults import thread_count
from ..target import cpu_target
from ..tuned import config_of, parse_workload
from .gemm import K_UNROLLS, THREAD_SPLITS, GemmBlocking, _round_up, analytic_gemm_blocking, blocking_legal

KC_VALUES = (32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 1024)
MC_VALUES = (16, 32, 48, 64, 96, 128, 144, 192, 240, 288, 336, 384, 480, 576, 768, 960)
NC_VALUES = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
MR_VALUES = (4, 6, 8, 10, 12, 14, 16)
PF_VALUES = (0, 4, 8, 16, 32)
KSPLIT_VALUES = (0, 1, 2, 4, 8)


def gemm_space(workload: str) -> KnobSpace:
    """The space of a `gemm` or `gemm_bf16` workload key (gemm.gemm_workload)."""
    template, facts = parse_workload(workload)
    m, n, k, dtype, panels = int(facts["m"]), int(facts["n"]), int(facts["k"]), facts["dtype"], facts["panels"] == "1"
    analytic = analytic_gemm_blocking(m, n, k, dtype, panels)
    lanes = max(cpu_target().vector_bytes // itemsize(dtype), 1)
    nr_values = (analytic.nr,) if panels else tuple(lanes * v for v in (1, 2, 3, 4))
    mr_values = (analytic.mr,) if panels else MR_VALUES

    def legal(config: Config) -> bool:
        return blocking_legal(GemmBlocking(**config), m, n, k, dtype, panels, analytic)

    def repair(config: Config) -> Config | None:
        """Blocks rounded to whole tiles and cut to the matrix (a mutation of mr leaves mc astray)."""
        mr, nr = config["mr"], config["nr"]
        config["kc"] = max(8, min(config["kc"], _round_up(k, 8)) // 8 * 8)
        config["mc"] = max(mr, min(config["mc"], _round_up(m, mr)) // mr * mr)
        config["nc"] = max(nr, min(config["nc"], _round_up(n, nr)) // nr * nr)
        return config

    plain = template == "gemm"  # gemm_bf16's micro-kernel has no unroll, prefetch or depth cut to tune
    tall = plain and not panels and k >= max(m, n)
    knobs = {"mr": mr_values, "nr": nr_values, "kc": KC_VALUES, "mc": MC_VALUES, "nc": NC_VALUES,
             "split": THREAD_SPLITS, "ku": K_UNROLLS if plain else (1,), "pf": PF_VALUES if plain else (0,),
             "ksplit": KSPLIT_VALUES if tall else (0,)}
    # the values past the matrix all repair to the same point: keep one of them
    knobs["kc"] = tuple(v for v in KC_VALUES if v < _round_up(k, 8)) + (_round_up(k, 8),)
    transposed = facts.get("bt") == "1"
    return KnobSpace(workload, knobs, config_of(analytic), legal, repair,
                     lambda config: gemm_features(config, m, n, k, dtype, transposed))


def gemm_features(config: Config, m: int, n: int, k: int, dtype: str, transposed: bool = False) -> list[float]:
    """Numbers describing the loop nest a configuration makes (the cost model's input)."""
    target, size, threads = cpu_target(), itemsize(dtype), max(thread_count(), 1)
    mr, nr, kc, mc, nc = (config[name] for name in ("mr", "nr", "kc", "mc", "nc"))
    padded = _round_up(m, mr) * _round_up(n, nr) / (m * n)
    blocks = (math.ceil(m / mc), math.ceil(n / nc), math.ceil(k / kc))
    l1 = (mr + nr) * kc * size / target.l1d
    l2 = mc * kc * size / target.l2
    l3 = kc * nc * size / target.l3
    intensity = 2 * mr * nr / (mr + nr)
    split = THREAD_SPLITS.index(config["split"])
    tasks = math.ceil(m / mr) if config["split"] != "cols" else math.ceil(n / nr)
    return [mr, nr, kc, mc, nc, mr * nr, intensity, l1, l2, l3, padded, *blocks, math.log2(m * n * k),
            split, tasks / threads, m / mc % 1.0, n / nc % 1.0, k / kc % 1.0,
            config.get("ku", 1), config.get("pf", 0), config.get("ksplit", 0), float(transposed)]


__all__ = ["gemm_features", "gemm_space"]
