"""build: loop-IR Program -> C source -> cached shared library -> CompiledModule, in one call."""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from tensorkiln.codegen.c import CSource, generate_c
from tensorkiln.loops.program import Program
from tensorkiln.runtime.c_compiler import CompiledLibrary, compile_c
from tensorkiln.runtime.module import CompiledModule


def build(program: Program, constants: Optional[Mapping[str, np.ndarray]] = None, *,
          debug: bool = False, asan: bool = False, profile: bool = False) -> CompiledModule:
    """Generate, compile (or find in the cache) and load `program`; bind `constants` by name.

    The returned module carries `.source` (the CSource), `.library` (the
    CompiledLibrary: path, cache hit, compile seconds) and `.source_path`.
    profile=True builds the per-kernel timing variant (`CompiledModule.kernel_seconds`).
    """
    source: CSource = generate_c(program, debug=debug or asan, profile=profile)
    library: CompiledLibrary = compile_c(source.text, debug=debug, asan=asan)
    module = CompiledModule(library.path, source.signature, constants, source_path=library.source_path,
                            compile_seconds=library.seconds, cache_hit=library.cache_hit, asan=asan)
    module.source = source
    module.library = library
    return module
