"""Streaming stores for outputs larger than the last-level cache.

Writing such an output with plain stores reads every line before writing it
(a third of the traffic of a copy) and evicts data still in use. A row
kernel (templates/rows.py: softmax, layer norm) already makes several passes
over a row that sits in L1; when its output is this large it writes the
row into a local stage buffer and copies the stage out with a `streamed`
loop, which the C backend writes with non-temporal stores
(codegen/c_stream.py):

    for row in 0..rows (parallel):
      ... passes over the row, the last one writing stage[e] ...
      for e_stream in 0..width (streamed):
        out[row*width + e_stream] = stage[e_stream]

Measured on 4096x4096 float32 (benchmarks/kernels.py): softmax and layer
norm move from ~70-75% to ~80-100% of STREAM copy. A single-pass elementwise
kernel (GELU) staged the same way ran slower (its reads and writes no longer
overlap), so it keeps plain stores.
"""
from __future__ import annotations

from ..loops.buffer import Buffer
from .target import cpu_target

STAGE_BYTES = 16 * 1024  # a staged row: on the stack, in L1 with room to spare
MIN_STREAM_BYTES = 1024  # shorter rows: the copy's alignment peel and call would cost more than they save


def streams_output(out: Buffer) -> bool:
    """True for an output worth streaming: float32 (what the backend streams), larger than the last-level cache."""
    return out.dtype == "float32" and out.scope == "global" and out.nbytes >= cpu_target().l3
