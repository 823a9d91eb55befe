"""Kernel profiles: where a compiled function spends its time, kernel by kernel.

`f.profile(*args, repeat=20)` builds a variant of the signature's library whose
entry reads the clock (omp_get_wtime) around every kernel, runs it `repeat`
times after one warm-up call, and returns a `KernelProfile`: each kernel's
name, kind, precision, the graph ops it implements and its mean time per call. The
variant is a separate cached library; the function's own library is untouched.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KernelTime:
    """One kernel's mean wall-clock time per call."""

    name: str
    kind: str
    ops: list[str]
    seconds: float
    precision: str = "fp32"  # kernels/precision.py
    tuned: bool = False  # its blocking came from a tuning record (kernels/tuned.py)


@dataclass
class KernelProfile:
    """Per-kernel times of one signature, in program order."""

    kernels: list[KernelTime] = field(default_factory=list)
    repeat: int = 0

    @property
    def total_seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def top(self, count: int = 10) -> list[KernelTime]:
        """The `count` slowest kernels, slowest first."""
        return sorted(self.kernels, key=lambda k: -k.seconds)[:count]

    def __str__(self) -> str:
        total = self.total_seconds or 1e-30
        # columns as wide as their longest entry: a precision such as "bf16 operands (fp32 kernel)" is
        # read whole, never cut
        name_w = max([28] + [len(k.name) for k in self.kernels])
        kind_w = max([12] + [len(k.kind) for k in self.kernels])
        precision_w = max([9] + [len(k.precision) for k in self.kernels])
        lines = [f"{len(self.kernels)} kernels, {self.total_seconds * 1e3:.3f} ms per call "
                 f"(mean of {self.repeat} calls), slowest first:",
                 f"{'kernel':<{name_w}} {'kind':<{kind_w}} {'precision':<{precision_w}} {'ms':>9} {'share':>6}  ops"]
        for k in self.top(len(self.kernels)):
            ops = ", ".join(k.ops[:6]) + (", ..." if len(k.ops) > 6 else "")
            lines.append(f"{k.name:<{name_w}} {k.kind:<{kind_w}} {k.precision:<{precision_w}} {k.seconds * 1e3:9.3f} "
                         f"{100 * k.seconds / total:5.1f}%  {ops}{'  [tuned]' if k.tuned else ''}")
        return "\n".join(lines)
