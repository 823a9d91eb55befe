"""Runtime calls: work that generated code hands back to Python (a collective over MPI).

A library whose program holds runtime calls exports `tk_set_runtime_hook`;
loading it (module.py) installs one C function pointer, which the generated
code calls as `hook("what", out, in)`: native_all_reduce.c's dispatcher, which
runs the short shared-memory all-reduces registered with it in C and hands
every other call to `_dispatch` here (or `_dispatch` itself where no C
compiler built the dispatcher). The first word of `what`
names the handler (registered here by the module that does the work, e.g.
collective_hook.py), the rest describes the call: so a cached library needs
nothing but its own text. A handler's exception is kept and raised by the
module once the entry returns its failure code, on this rank as the original
error.
"""
from __future__ import annotations

import ctypes
from typing import Callable

from . import native_all_reduce

# int hook(const char *what, void *out, const void *in); the description comes as its address, which a
# call site's handler may register with the native dispatcher
HOOK_TYPE = native_all_reduce.HOOK_TYPE
TK_ERR_RUNTIME = 3  # the entry's status when a runtime call failed (codegen/c_entry.py's RUNTIME_HOOK)

# handler(what, out address, in address); registered once per kind of call.
Handler = Callable[[str, int, int], None]
_handlers: dict[str, Handler] = {}
_failures: list[BaseException] = []  # the exception of the failed call, until the module raises it


def register_handler(name: str, handler: Handler) -> None:
    """Route runtime calls whose description starts with `name` to `handler`."""
    _handlers[name] = handler


_calling = 0  # the address of the description of the call being handled (0: none, or given as bytes)


def calling_address() -> int:
    """(In a handler) the address of the call's description in its library: one per call site."""
    return _calling


def _dispatch(what: int | bytes, out: int, in_: int) -> int:
    """Run the handler of the call `what` describes (its address, or the text itself); 0, or 1 on failure."""
    global _calling
    try:
        address = what if isinstance(what, int) else 0
        text = (ctypes.string_at(what) if address else what).decode()
        name = text.split(" ", 1)[0]
        if name not in _handlers:
            raise RuntimeError(f"generated code asked the runtime for {name!r}, which nothing here handles")
        _calling = address
        try:
            _handlers[name](text, out, in_)
        finally:
            _calling = 0
        return 0
    except BaseException as err:  # never let an exception cross the C frames: report it as a status
        _failures.append(err)
        return 1


PYTHON_HOOK = HOOK_TYPE(_dispatch)  # kept alive for the life of the process: libraries hold its address


def keep_failure(err: BaseException) -> None:
    """Keep the exception of a runtime call that failed outside Python (the module raises it)."""
    _failures.append(err)


def install(library: ctypes.CDLL) -> None:
    """Give a loaded library the hook, when its program makes runtime calls."""
    try:
        setter = library.tk_set_runtime_hook
    except AttributeError:
        return
    setter.argtypes = [HOOK_TYPE]
    setter.restype = None
    setter(native_all_reduce.hook(PYTHON_HOOK, keep_failure) or PYTHON_HOOK)


def take_failure() -> BaseException | None:
    """The exception of the runtime call that failed last (cleared), or None."""
    failure = _failures[-1] if _failures else None
    _failures.clear()
    return failure
