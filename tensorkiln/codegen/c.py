"""C99 + OpenMP code generation from loop IR.

## C backend (for docs/architecture.md)

`generate_c(program)` turns one `Program` (all kernels of one graph) into one
C translation unit, so a graph costs one compiler call however many kernels
it has:

- a prelude (c_prelude.py) with the helpers that give C the IR's semantics:
  floor division/modulo, NaN-propagating min/max, float16/bfloat16
  conversions, and the error state;
- one `static void kernel_<name>(...)` function per kernel, preceded by a
  comment naming the graph nodes it implements. Parameters are
  `T *restrict name` (`const` when the kernel only reads them): the program
  never passes one buffer twice to a kernel, so they do not alias. In a
  release build, kernels whose functions differ only in their buffers (a
  transformer's layers) are computed by the first one's function, called
  with their own buffers (c_shared.py): the compiler reads each once;
- one exported entry, `int tk_entry(void *const *args, void *arena)`: `args`
  holds the inputs, outputs and constants in signature order; intermediates
  live at fixed offsets in `arena`, which the runtime allocates once (a
  memory planner only has to choose the offsets). The entry calls the
  kernels in order and returns 0, or the code of the first failure;
- `tk_last_error()`, `tk_arena_bytes()` and `tk_signature()` for the runtime;
- in a program with runtime calls (collectives: a kernel whose body is a
  `RuntimeCall`), a hook pointer the runtime sets through the exported
  `tk_set_runtime_hook` (runtime/hooks.py), and each call as
  `tk_runtime_hook("what", out, in)`: the generated code never links MPI.

Loop kinds map to: `parallel` -> `#pragma omp parallel for` (with
`collapse(n)` over perfectly nested parallel loops, and `if(cond)` when the
loop's `threads_if` decides at run time); `vectorized` ->
`#pragma omp simd`, which with `-O3 -march=native` gives real AVX2/AVX-512
vector code and stays a plain C loop to read (GCC vector types would make
the source harder to read for no gain at this level); `unrolled` ->
`#pragma GCC unroll`. A scalar that a parallel or vectorized loop updates as
`acc = acc op x` (op: + * min max) becomes a `reduction(op:acc)` clause; any
other loop-carried scalar makes that loop serial, with a comment saying why.

Next-row prefetch (`RowPrefetch`): in a loop over rows whose body makes
several passes over one row (a row kernel: softmax, layer norm), the second
pass prefetches the next row of the buffers the first pass streamed, so the
memory works while the cached row is computed on.

Debug mode (`generate_c(program, debug=True)`) checks every load and store
whose index the interval analysis cannot prove in range: a failed check
records "kernel K: load of B[i] out of bounds (buffer size n)", skips the
access (a store is dropped, a load reads element 0), and the entry returns
non-zero, which the runtime raises as a Python exception. SIMD pragmas are
left out in debug mode (a check has side effects). The runtime compiles
debug code with -O1 -g -fsanitize=undefined, and -fsanitize=address on
request: see tensorkiln/runtime/c_compiler.py for why ASan is opt-in.

This module assembles the file; each part is written by its own module:
c_expr.py (expressions: literals, operators, loads and the proofs that drop
checks), c_kernel.py (a kernel's function: statements, loops, local buffers),
c_openmp.py (collapse and reduction clauses), c_shared.py (one function
for kernels that differ only in their buffers), c_entry.py (the entry, the
exports and the runtime hook), c_prelude.py, c_stream.py, c_prefetch.py and
c_native.py (the helpers and intrinsics the kernels call).
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorkiln.codegen.c_entry import RUNTIME_HOOK, entry_function, exports, program_signature, size_globals
from tensorkiln.codegen.c_kernel import KernelWriter
from tensorkiln.codegen.c_prelude import c_prelude
from tensorkiln.codegen.c_shared import share_functions
from tensorkiln.codegen.c_stream import STREAM_HELPERS
from tensorkiln.loops.ir import RuntimeCall, iter_stmts, simplify_kernel
from tensorkiln.loops.program import Program
from tensorkiln.runtime.signature import Signature


@dataclass(frozen=True)
class CSource:
    """Generated C text and the calling signature of its entry function."""

    text: str
    signature: Signature
    debug: bool
    program_name: str


def generate_c(program: Program, debug: bool = False, simplify: bool = True, profile: bool = False,
               vector_bits: int | None = None) -> CSource:
    """Generate one C translation unit for `program` (see the module docstring for its layout).

    profile=True times every kernel call in the entry and exports
    `tk_profile_read(double *seconds)` (one slot per kernel, reset on read). vector_bits: the vector
    width the kernels were lowered for (kernels/target.py), which GCC is told to prefer.
    """
    signature = program_signature(program)
    # debug: local buffers from malloc, each one where the address sanitizer sees its bounds
    parts = [("#define TK_SCRATCH_MAX 0\n" if debug else "") + c_prelude(vector_bits), ""]
    if any(isinstance(s, RuntimeCall) for k in program.kernels for s in iter_stmts(k.body)):
        parts += [RUNTIME_HOOK, ""]
    natives: dict[str, str] = {}
    natives_end = 1  # helpers go after the prelude, in the order first called (a later one may call an earlier)
    parts += size_globals(program)
    writers = []
    for part in program.all_programs():
        aliased = frozenset(name for pair in part.aliases for name in pair)
        writers += [KernelWriter(simplify_kernel(k) if simplify else k, debug, aliased) for k in part.kernels]
    functions = [(writer.kernel, writer.function()) for writer in writers]
    shared = share_functions(functions, share=not debug)  # debug messages name each kernel's own buffers
    by_kernel = iter(writers)
    for part in program.all_programs():  # sub-programs (control-flow bodies) before their callers
        outer = part is program
        parts.append(f"/* ================= {'program' if outer else 'sub-program'} {part.name}: "
                     f"{len(part.kernels)} kernel(s){' (debug: bounds checks on)' if debug else ''} ================= */")
        for _ in part.kernels:
            writer = next(by_kernel)
            parts.append("")
            parts.extend(shared.lines[writer.kernel.name])
            if writer.streamed and STREAM_HELPERS not in parts:
                parts.insert(1, STREAM_HELPERS)
                natives_end += 1
            for function, source in writer.native_sources.items():
                if natives.setdefault(function, source) != source:
                    raise ValueError(f"two definitions of the native helper {function}")
                elif source not in parts:
                    parts.insert(natives_end, source)
                    natives_end += 1
        parts.append("")
        if not outer:
            parts.extend(entry_function(part, program_signature(part), sub=True, calls=shared))
            parts.append("")
    parts.extend(entry_function(program, signature, profile, calls=shared))
    parts.append("")
    parts.extend(exports(signature))
    return CSource("\n".join(parts) + "\n", signature, debug, program.name)
