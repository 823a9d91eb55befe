"""CompileOptions: every per-compile option, validated once, read nowhere else.

tk.jit / tk.compile build one CompileOptions from their keyword arguments;
the pipeline (stages.py) hands it, or the value a stage needs, to each stage
as an argument. No other module reads these options from the environment or
keeps its own copy or check of them. A new compile option belongs here: a
field, its check in `__post_init__`, and (when it changes the generated code)
its part of `cache_text`.

Two options may come from the environment when not given: debug
(TENSORKILN_DEBUG=1) and dump_dir (TENSORKILN_DUMP_IR=dir). They are read at
each compile, by `resolved()`, so setting the variable affects the next
signature compiled.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from ..passes.weight_only import weight_only_spec
from ..shapes import Dim

OPT_LEVELS = (0, 1, 2, 3)
BACKENDS = ("c", "interpreter")
PRECISIONS = ("fp32", "bf16", "int8w", "int4w")  # and "int8w-g<size>", "int4w-g<size>" (passes/weight_only.py)


@dataclass(frozen=True)
class CompileOptions:
    """How to compile a traced function; invalid values raise ValueError or TypeError here.

    opt_level: 0..3, the graph-optimization pipeline (tensorkiln.passes); 0 also turns off
        fusion and arena sharing (every computing op its own kernel, every temp its own memory).
    debug: bounds-checked, sanitized code; None reads TENSORKILN_DEBUG at each compile.
    fast_math: allow rewrites that are exact for real numbers but not for every float.
    backend: "c" (generate, compile and load C) or "interpreter" (run the optimized graph with
        the reference interpreter).
    donate_argnums: positional arguments whose arrays the call may overwrite with outputs.
    dump_dir: write every stage's result there (the graph after each pass, the kernel grouping,
        the loop IR, the memory plan, the C source's path); None reads TENSORKILN_DUMP_IR.
    precision: "fp32" (default) or "bf16": matmuls, convolutions and attention take bf16 operands
        and accumulate in fp32; every other op stays fp32 (the rule: passes/precision.py).
        "int8w" / "int4w" (optionally "-g<size>"): the constant weights of matmuls are quantized to
        int8 / int4 at compile time, activations stay fp32 (passes/weight_only.py).
    recompile_limit: programs one jitted function may compile before each further compile warns
        (RecompileWarning, naming the argument and dimension that changed), as torch's option.
    cache_limit: compiled programs one jitted function holds at most; past it, the least recently
        used one is released (its library unloaded) and compiled again (usually from the on-disk
        cache) if it is called again. None: no limit.
    dynamic: which input dimensions are traced as size symbols (frontend/dynamic.py): None
        (automatic: a dimension seen with a second size), True (every dimension of size >= 2),
        False (none), or {argument name: {axis: name or tk.Dim}}; kept as a tuple of
        (argument, ((axis, Dim), ...)) pairs. It decides the traced graph, not the generated code's
        options: a symbolic graph's fingerprint names its symbols.
    """

    opt_level: int = 2
    debug: bool | None = None
    fast_math: bool = False
    backend: str = "c"
    donate_argnums: frozenset[int] = frozenset()
    dump_dir: str | None = None
    precision: str = "fp32"
    recompile_limit: int = 8
    cache_limit: int | None = 64
    dynamic: object = None

    def __post_init__(self) -> None:
        if isinstance(self.opt_level, bool) or self.opt_level not in OPT_LEVELS:
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")
        if self.debug is not None and not isinstance(self.debug, bool):
            raise TypeError(f"debug must be True, False or None (TENSORKILN_DEBUG decides), got {self.debug!r}")
        if not isinstance(self.fast_math, bool):
            raise TypeError(f"fast_math must be True or False, got {self.fast_math!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be 'c' or 'interpreter', got {self.backend!r}")
        argnums = self.donate_argnums
        argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        if not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in argnums):
            raise ValueError(f"donate_argnums must be non-negative argument positions, got {argnums!r}")
        object.__setattr__(self, "donate_argnums", frozenset(argnums))
        if self.dump_dir is not None and not isinstance(self.dump_dir, (str, os.PathLike)):
            raise TypeError(f"dump_dir must be a directory path or None, got {self.dump_dir!r}")
        if self.precision not in PRECISIONS and weight_only_spec(self.precision) is None:
            raise ValueError(f"precision must be 'fp32' or 'bf16', or weight-only 'int8w' or 'int4w' (with "
                             f"'-g<size>' for groups of that many depths: 'int4w-g128'), got {self.precision!r}")
        if isinstance(self.recompile_limit, bool) or not isinstance(self.recompile_limit, int) \
                or self.recompile_limit < 1:
            raise ValueError(f"recompile_limit must be a positive integer, got {self.recompile_limit!r}")
        if self.cache_limit is not None and (isinstance(self.cache_limit, bool) or
                                             not isinstance(self.cache_limit, int) or self.cache_limit < 1):
            raise ValueError(f"cache_limit must be a positive integer or None, got {self.cache_limit!r}")
        object.__setattr__(self, "dynamic", _normalize_dynamic(self.dynamic))

    def resolved(self) -> CompileOptions:
        """These options with debug and dump_dir taken from the environment where they were not given."""
        debug = self.debug
        if debug is None:
            debug = os.environ.get("TENSORKILN_DEBUG", "") not in ("", "0")
        dump_dir = self.dump_dir if self.dump_dir is not None else os.environ.get("TENSORKILN_DUMP_IR") or None
        return dataclasses.replace(self, debug=debug, dump_dir=dump_dir and os.fspath(dump_dir))

    # ---- what the stages derive from the options ---------------------------------------------
    @property
    def fuse(self) -> bool:
        """Kernel grouping fuses producers into their readers (else one kernel per computing op)."""
        return self.opt_level >= 1

    @property
    def share_arena(self) -> bool:
        """Temps whose lifetimes do not overlap share arena memory (else each has its own)."""
        return self.opt_level >= 1

    @property
    def blocked_layouts(self) -> bool:
        """The graph passes may choose blocked layouts and pre-transformed weights (for the C kernels)."""
        return self.backend == "c"

    @property
    def compiles_c(self) -> bool:
        return self.backend == "c"

    def cache_text(self) -> str:
        """The options the generated code depends on, as a part of the compiled-graph cache key (resolved)."""
        return f"opt={self.opt_level};fast_math={self.fast_math};debug={self.debug};precision={self.precision}"


def _normalize_dynamic(dynamic):
    """The `dynamic` option in one form: None, True, False, or ((argument, ((axis, Dim), ...)), ...)."""
    if dynamic is None or isinstance(dynamic, (bool, tuple)):  # a tuple: normalized already
        return dynamic
    if not isinstance(dynamic, dict):
        raise TypeError(f"dynamic must be True, False, None or a dict {{argument: {{axis: name or tk.Dim}}}}, "
                        f"got {type(dynamic).__name__}")
    result = []
    for argument, axes in dynamic.items():
        if not isinstance(argument, str) or not isinstance(axes, dict):
            raise TypeError(f"dynamic: expected argument name -> {{axis: name or tk.Dim}}, got {argument!r}: {axes!r}")
        entries = []
        for axis, dim in axes.items():
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise TypeError(f"dynamic[{argument!r}]: axis {axis!r} is not an int")
            entries.append((axis, dim if isinstance(dim, Dim) else Dim(dim)))
        result.append((argument, tuple(entries)))
    return tuple(result)


__all__ = ["BACKENDS", "CompileOptions", "OPT_LEVELS", "PRECISIONS"]
