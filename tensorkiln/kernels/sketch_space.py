"""The search space of a sketch workload (sketch.py): the knobs whose rules apply to its kernel, and features.

A knob whose rule finds no loop to act on has the single value 0; the
factors offered are those below the extent of the loop they split. `legal`
applies the sketch, so every primitive's own check decides membership, the
same check `tuned.configured` makes of a record read back.

Features for the cost model (`sketch_features`): the knobs; log2 of the
extents the rules act on (vector loop, the loop around it, the parallel
loop, the reduction loop) and of the output's elements; the vector loop's
tail (extent mod the tile, as a fraction of the tile), the iterations each
thread's task runs, and the partial accumulators per reduction element.
"""
from __future__ import annotations

import dataclasses
import math

from ..loops.ir import Kernel
from .knob_space import Config, KnobSpace
from .schedule_defaults import thread_count
from .sketch import NestFacts, SketchConfig, measurable_alone, nest_facts, sketch_config, sketch_kernel, sketch_legal

TILES = (8, 16, 32, 64, 128, 256, 512)
UNROLLS = (2, 4, 8)
GRAINS = (2, 4, 8, 16, 32)
RFACTORS = (4, 8, 16, 32, 64)
PLACES = 6  # the first loops (buffers) the cache_write (compute_at) rule may choose among


def _below(values: tuple[int, ...], extent: int) -> tuple[int, ...]:
    return (0,) + tuple(v for v in values if v < extent)


def sketch_knobs(facts: NestFacts) -> dict[str, tuple]:
    """Each knob's values for a kernel with these facts (0 alone where the rule does not apply)."""
    vector = facts.extent(facts.vector)
    fused_vector = vector * facts.extent(facts.fusable[0]) if facts.fusable else 0
    return {
        "fuse": (0, 1) if facts.fusable else (0,),
        "tile": _below(TILES, max(vector, fused_vector)),
        "unroll": _below(UNROLLS, facts.extent(facts.around)),
        "grain": _below(GRAINS, facts.extent(facts.parallel)),
        "parallel": (0, 1) if facts.serial_outer is not None else (0,),
        "rfactor": _below(RFACTORS, facts.extent(facts.reduction)),
        "cache_write": tuple(range(min(facts.accumulating, PLACES) + 1)),
        "compute_at": tuple(range(min(facts.producers, PLACES) + 1)),
    }


def sketch_features(kernel: Kernel, facts: NestFacts, config: Config) -> list[float]:
    """Numbers describing the loop nest `config` makes of `kernel` (see the module docstring)."""
    c = sketch_config(config)
    log = lambda x: math.log2(max(x, 1))  # noqa: E731
    vector, around = facts.extent(facts.vector), facts.extent(facts.around)
    parallel, reduction = facts.extent(facts.parallel), facts.extent(facts.reduction)
    elements = math.prod(kernel.params[0].shape) if kernel.params[0].shape else 1
    tile = c.tile or max(vector, 1)
    tail = (vector % tile) / tile if vector else 0.0
    tasks = parallel / max(c.grain, 1) if parallel else (facts.extent(facts.serial_outer) if c.parallel else 0)
    per_thread = tasks / thread_count() if tasks else 0.0
    return [float(v) for v in dataclasses.astuple(c)] + [
        log(vector), log(around), log(parallel), log(reduction), log(elements), tail, per_thread,
        reduction / c.rfactor if c.rfactor else float(reduction)]


def sketch_space(workload: str) -> KnobSpace | None:
    """The space of a sketch workload whose kernel was lowered in this process (None: not lowered here, or
    a kernel that cannot be measured alone)."""
    kernel = sketch_kernel(workload)
    if kernel is None or not measurable_alone(kernel):
        return None
    facts = nest_facts(kernel)
    default = dataclasses.asdict(SketchConfig())
    return KnobSpace(workload, sketch_knobs(facts), default,
                     legal=lambda config: sketch_legal(kernel, sketch_config(config)),
                     features=lambda config: sketch_features(kernel, facts, config))


__all__ = ["GRAINS", "PLACES", "RFACTORS", "TILES", "UNROLLS", "sketch_features", "sketch_knobs", "sketch_space"]
