"""The last two stages: generate C from a loop-IR Program, then compile it (or find it in the cache) and load it.

`generate` and `compile_and_load` are the pipeline's "generate C" and "build"
stages (stages.py); `build` does both in one call, for tests, tools and the
per-kernel timing variant of `CompiledGraph.profile`.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from tensorkiln.codegen.c import CSource, generate_c
from tensorkiln.kernels.target import cpu_target
from tensorkiln.loops.program import Program
from tensorkiln.runtime.c_compiler import CompiledLibrary, compile_c, discard_library
from tensorkiln.runtime.module import CompiledModule, LibraryLoadError


def generate(program: Program, *, debug: bool = False, profile: bool = False) -> CSource:
    """The C translation unit of `program` (debug: bounds checks; profile: a clock around every kernel), for
    the vector width the kernels were lowered for."""
    return generate_c(program, debug=debug, profile=profile, vector_bits=cpu_target().vector_bytes * 8)


def compile_and_load(source: CSource, constants: Optional[Mapping[str, np.ndarray]] = None, *,
                     debug: bool = False, asan: bool = False, name: Optional[str] = None) -> CompiledModule:
    """Compile `source` (or find its library in the cache), load it and bind `constants` by name
    (`name`, the graph's, is what the module's errors call it).

    The returned module carries `.source` (the CSource), `.library` (the
    CompiledLibrary: path, cache hit, compile seconds) and `.source_path`.
    """
    library: CompiledLibrary = compile_c(source.text, debug=debug, asan=asan)
    try:
        module = _load(library, source, constants, asan, name)
    except LibraryLoadError:
        # Damaged although its checksum matched (both written wrong), or evicted meanwhile: build it again.
        discard_library(library.key)
        library = compile_c(source.text, debug=debug, asan=asan)
        module = _load(library, source, constants, asan, name)
    module.source = source
    module.library = library
    return module


def _load(library: CompiledLibrary, source: CSource, constants: Optional[Mapping[str, np.ndarray]],
          asan: bool, name: Optional[str]) -> CompiledModule:
    return CompiledModule(library.path, source.signature, constants, source_path=library.source_path,
                          compile_seconds=library.seconds, cache_hit=library.cache_hit, asan=asan, name=name)


def build(program: Program, constants: Optional[Mapping[str, np.ndarray]] = None, *,
          debug: bool = False, asan: bool = False, profile: bool = False) -> CompiledModule:
    """Generate, compile (or find in the cache) and load `program`; bind `constants` by name.

    profile=True builds the per-kernel timing variant (`CompiledModule.kernel_seconds`).
    """
    source = generate(program, debug=debug or asan, profile=profile)
    return compile_and_load(source, constants, debug=debug, asan=asan)
