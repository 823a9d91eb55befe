"""Runtime calls: work that generated code hands back to Python (a collective over MPI).

A library whose program holds runtime calls exports `tk_set_runtime_hook`;
loading it (module.py) installs one C function pointer, `dispatch`, which the
generated code calls as `hook("what", out, in)`. The first word of `what`
names the handler (registered here by the module that does the work, e.g.
collective_hook.py), the rest describes the call: so a cached library needs
nothing but its own text. A handler's exception is kept and raised by the
module once the entry returns its failure code, on this rank as the original
error.
"""
from __future__ import annotations

import ctypes
from typing import Callable

HOOK_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p)
TK_ERR_RUNTIME = 3  # the entry's status when a runtime call failed (codegen/c_entry.py's RUNTIME_HOOK)

# handler(what, out address, in address); registered once per kind of call.
Handler = Callable[[str, int, int], None]
_handlers: dict[str, Handler] = {}
_failures: list[BaseException] = []  # the exception of the failed call, until the module raises it


def register_handler(name: str, handler: Handler) -> None:
    """Route runtime calls whose description starts with `name` to `handler`."""
    _handlers[name] = handler


def _dispatch(what: bytes, out: int, in_: int) -> int:
    try:
        text = what.decode()
        name = text.split(" ", 1)[0]
        if name not in _handlers:
            raise RuntimeError(f"generated code asked the runtime for {name!r}, which nothing here handles")
        _handlers[name](text, out, in_)
        return 0
    except BaseException as err:  # never let an exception cross the C frames: report it as a status
        _failures.append(err)
        return 1


_HOOK = HOOK_TYPE(_dispatch)  # kept alive for the life of the process: libraries hold its address


def install(library: ctypes.CDLL) -> None:
    """Give a loaded library the hook, when its program makes runtime calls."""
    try:
        setter = library.tk_set_runtime_hook
    except AttributeError:
        return
    setter.argtypes = [HOOK_TYPE]
    setter.restype = None
    setter(_HOOK)


def take_failure() -> BaseException | None:
    """The exception of the runtime call that failed last (cleared), or None."""
    failure = _failures[-1] if _failures else None
    _failures.clear()
    return failure
