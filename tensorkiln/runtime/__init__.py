"""Runtime: compile C through the on-disk cache (compiler.py), load and call it (module.py)."""
from tensorkiln.runtime.c_compiler import CompiledLibrary, compile_c, find_c_compiler
from tensorkiln.runtime.module import CompiledModule, KernelError, OutOfBoundsError
from tensorkiln.runtime.signature import ArgSpec, Signature

__all__ = ["ArgSpec", "CompiledLibrary", "CompiledModule", "KernelError", "OutOfBoundsError", "Signature",
           "compile_c", "find_c_compiler"]
