"""The warm call of a compiled program in C (fastcall.c), built once per Python and numpy version.

A call of a tk.jit function whose arguments are exactly as checked before
(plain C-contiguous arrays or eager tensors of the traced dtypes and shapes)
spends most of its time in Python: building the signature key, checking the
arrays, picking output arrays, taking the lock, the ctypes call. fastcall.c
does those steps for one program in one C function; anything it is not sure
of (another shape, a strided view, a traced tensor, another thread holding the
program) returns None and the Python path runs, with its conversions and its
error messages. The extension is built with the system C compiler into the
compile cache, like generated code; without Python's headers, or with
TENSORKILN_NO_FASTCALL=1, every call takes the Python path.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import numpy as np

from tensorkiln.errors import CompileError

from .c_compiler import compile_c

_SOURCE = Path(__file__).with_name("fastcall.c")
_log = logging.getLogger("tensorkiln")


@functools.lru_cache(maxsize=None)
def extension() -> ModuleType | None:
    """The loaded `_tk_fastcall` module, or None when it cannot be built here (logged)."""
    if os.environ.get("TENSORKILN_NO_FASTCALL", "") not in ("", "0"):
        return None
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        _log.debug("fast call path off: no Python.h in %s", include)
        return None
    # The ABI it is built for is part of the source, so the compile cache keys it.
    header = f"/* built for Python {sys.version.split()[0]} ({sys.implementation.cache_tag}), numpy {np.__version__} */\n"
    flags = ("-std=gnu11", f"-I{include}", f"-I{np.get_include()}")
    try:
        library = compile_c(header + _SOURCE.read_text(), extra_flags=flags)
        loader = importlib.machinery.ExtensionFileLoader("_tk_fastcall", library.path)
        spec = importlib.util.spec_from_file_location("_tk_fastcall", library.path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    except (CompileError, OSError, ImportError) as err:
        _log.debug("fast call path off: %s", err)
        return None
