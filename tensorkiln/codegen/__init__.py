"""Code generation from loop IR: C99 + OpenMP (c.py assembles the file; see its docstring for the parts)."""
from tensorkiln.codegen.c import CSource, generate_c

__all__ = ["CSource", "generate_c"]
