"""The program's entry and exports: the C functions around the kernels that the runtime calls.

- `entry_function`: the exported `tk_entry(args, arena)` of a program (or the static
  `tk_program_<name>` of a sub-program), which binds the arguments and the arena
  offsets to the kernels' pointers, sets the size symbols and calls the kernels in
  order, returning the first failure; with profiling, a clock around every call;
- `exports`: `tk_last_error`, `tk_arena_bytes` and `tk_signature`;
- `RUNTIME_HOOK`: the hook pointer through which runtime calls (collectives) reach
  the runtime (runtime/hooks.py).
"""
from __future__ import annotations

from tensorkiln.codegen.c_expr import ExprWriter
from tensorkiln.codegen.c_names import INDENT, c_comment, c_name, check_unique_c_names, program_function_name
from tensorkiln.codegen.c_prelude import C_TYPES
from tensorkiln.codegen.c_shared import SharedFunctions
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, lift
from tensorkiln.loops.program import Program
from tensorkiln.runtime.signature import ArgSpec, Signature


def _size_code(value) -> str:
    """C code for a size outside any kernel (an arena offset): an int, or an expression over size symbols."""
    if isinstance(value, int):
        return str(value)
    return ExprWriter("entry", False).expr(lift(value, Const(0)))[0]


def size_globals(program: Program) -> list[str]:
    """The size symbols' values of the current call, set by the entry, read by the kernels."""
    if not program.sizes:
        return []
    return ["/* size symbols: set by tk_entry from its sizes argument on every call */"] + \
        [f"static int64_t tk_size_{size};" for size in program.sizes] + [""]


def program_signature(program: Program) -> Signature:
    """The calling signature of `program`'s entry: its inputs, outputs and constants in order, the
    arena size and the size symbols."""
    def specs(buffers: tuple[Buffer, ...], role: str) -> tuple[ArgSpec, ...]:
        return tuple(ArgSpec(b.name, b.dtype, tuple(d if isinstance(d, int) else str(d) for d in b.shape), role)
                     for b in buffers)

    # a symbolic program's arena size depends on the sizes: the caller computes it per call
    arena = program.arena_bytes if not program.sizes else 0
    return Signature(specs(program.inputs, "input"), specs(program.outputs, "output"),
                     specs(program.constants, "constant"), arena, sizes=program.sizes)


def entry_function(program: Program, signature: Signature, profile: bool = False, sub: bool = False,
                   calls: SharedFunctions | None = None) -> list[str]:
    """The entry function of `program`: exported `tk_entry`, or, for a sub-program, its static
    `tk_program_<name>` that a control-flow kernel calls. `calls` says which function computes each
    kernel (c_shared.py; by default its own)."""
    calls = calls or SharedFunctions()
    check_unique_c_names([b.name for b in program.buffers], f"program {program.name}")
    lines = _profile_counters(program) if profile else []
    lines += ["/*", f" * entry for {'sub-' if sub else ''}program {program.name}", " *   args, in order:"]
    for i, arg in enumerate(signature.args):
        lines.append(c_comment(f" *     [{i}] {arg.role} {arg.describe()}"))
    layout = program.arena_layout()
    if program.sizes:
        lines.append(c_comment(f" *     [{len(signature.args)}] sizes: int64[{len(program.sizes)}] "
                              f"({', '.join(program.sizes)})"))
    if program.temps:
        lines.append(f" *   arena ({program.arena_bytes} bytes):")
        for t in program.temps:
            lines.append(c_comment(f" *     +{layout[t.name]} {t}"))
    head = f"static int {program_function_name(program.name)}" if sub else "TK_EXPORT int tk_entry"
    lines += [" */", f"{head}(void *const *args, void *arena)", "{"]
    if program.sizes:  # read once per call (a sub-program: from the outer entry's); kernels take local copies
        if not sub:
            lines.append(f"{INDENT}const int64_t *tk_sizes = (const int64_t *)args[{len(signature.args)}];")
        for i, size in enumerate(program.sizes):
            value = f"tk_size_{size}" if sub else f"tk_size_{size} = tk_sizes[{i}]"
            lines.append(f"{INDENT}const int64_t {c_name(size)} = {value}; (void){c_name(size)};")
    used = {p.name for k in program.kernels for p in k.params}
    for i, arg in enumerate(signature.args):
        buffer = next(b for b in program.buffers if b.name == arg.name)
        ctype = C_TYPES[buffer.dtype]
        const = "const " if arg.role in ("input", "constant") else ""
        unused = "" if arg.name in used else " (void)" + c_name(arg.name) + ";"
        lines.append(f"{INDENT}{const}{ctype} *{c_name(arg.name)} = ({const}{ctype} *)args[{i}];{unused}")
    for t in program.temps:
        ctype = C_TYPES[t.dtype]
        unused = "" if t.name in used else " (void)" + c_name(t.name) + ";"
        offset = _size_code(layout[t.name])
        lines.append(f"{INDENT}{ctype} *{c_name(t.name)} = ({ctype} *)((char *)arena + {offset});{unused}")
    if not program.temps:
        lines.append(f"{INDENT}(void)arena;")
    lines += [f"{INDENT}(void){c_name(size)};" for size in program.sizes]
    if not sub:  # a sub-program runs only while the status is OK; a concurrent part's failure must stand
        lines.append(f"{INDENT}tk_status = TK_OK;")
    if profile:
        lines.append(f"{INDENT}double tk_clock = omp_get_wtime();")
    for i, k in enumerate(program.kernels):
        lines.append(f"{INDENT}{calls.call(k).code(k, [c_name(p.name) for p in k.params])};")
        lines.append(f"{INDENT}if (tk_status != TK_OK) return tk_status;")
        if profile:
            lines.append(f"{INDENT}tk_clock = tk_profile_tick({i}, tk_clock);")
    lines += [f"{INDENT}return TK_OK;", "}"]
    return lines


def _profile_counters(program: Program) -> list[str]:
    """Per-kernel wall-clock counters of a profiling build, and their export."""
    n = max(len(program.kernels), 1)
    return [
        "/* profiling build: seconds spent in each kernel, summed over calls */",
        "#include <omp.h>",
        f"static double tk_profile_seconds[{n}];",
        "",
        "static double tk_profile_tick(int kernel, double since)",
        "{",
        f"{INDENT}double now = omp_get_wtime();",
        f"{INDENT}tk_profile_seconds[kernel] += now - since;",
        f"{INDENT}return now;",
        "}",
        "",
        "TK_EXPORT void tk_profile_read(double *seconds)",
        "{",
        f"{INDENT}for (int i = 0; i < {n}; i++) {{",
        f"{INDENT * 2}seconds[i] = tk_profile_seconds[i];",
        f"{INDENT * 2}tk_profile_seconds[i] = 0.0;",
        f"{INDENT}}}",
        "}",
        "",
    ]


def exports(signature: Signature) -> list[str]:
    """The functions through which the runtime reads the last error, the arena size and the signature."""
    encoded = signature.encode().replace("\\", "\\\\").replace('"', '\\"')
    return [
        "TK_EXPORT const char *tk_last_error(void)",
        "{",
        f"{INDENT}return tk_message;",
        "}",
        "",
        "TK_EXPORT int64_t tk_arena_bytes(void)",
        "{",
        f"{INDENT}return {signature.arena_bytes};",
        "}",
        "",
        "TK_EXPORT const char *tk_signature(void)",
        "{",
        f'{INDENT}return "{encoded}";',
        "}",
    ]


# Work the generated code asks of the runtime (a collective over MPI): the runtime installs the hook when it
# loads the library; an exported library run without one fails cleanly instead of calling through null.
RUNTIME_HOOK = """/* runtime calls: int hook(const char *what, void *out, const void *in), 0 on success */
enum { TK_ERR_RUNTIME = 3 };
static int (*tk_runtime_hook)(const char *, void *, const void *);

TK_EXPORT void tk_set_runtime_hook(int (*hook)(const char *, void *, const void *))
{
    tk_runtime_hook = hook;
}"""
