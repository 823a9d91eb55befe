"""Which templates can be tuned, and each one's search space by workload key (template name first)."""
from __future__ import annotations

from typing import Callable

from ..knob_space import KnobSpace
from ..sketch_space import sketch_space
from ..tuned import parse_workload
from .conv_space import conv_space
from .gemm_space import gemm_space

SPACES: dict[str, Callable[[str], KnobSpace | None]] = {
    "gemm": gemm_space,
    "gemm_bf16": gemm_space,
    "conv": conv_space,
    "sketch": sketch_space,  # kernels without a template (None until its kernel was lowered in this process)
}


def space_of(workload: str) -> KnobSpace | None:
    """The search space of a workload key, or None for a template without one."""
    make = SPACES.get(parse_workload(workload)[0])
    return make(workload) if make is not None else None


__all__ = ["SPACES", "space_of"]
