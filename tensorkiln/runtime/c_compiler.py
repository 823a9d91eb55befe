"""Compile generated C into a shared library, through a content-addressed cache on disk.

The cache lives at `$TENSORKILN_CACHE` (default `~/.cache/tensorkiln`). An
entry is a directory named by the sha256 of everything that decides the
machine code: the source, the compiler's `--version` text, the flags and the
CPU's feature flags (from /proc/cpuinfo, since `-march=native` depends on
them). It holds `module.c` (so an error message can point at the source),
`module.so`, `module.so.sha256` and `build.json`.

Atomicity: a build happens in a fresh temporary directory inside the cache
and is published with one `os.rename` of the whole directory. Renaming onto
an existing non-empty directory fails, so of two processes compiling the
same source, one publishes and the other finds the entry complete and uses
it; nobody ever sees half a library. On every lookup the library's sha256 is
checked against the stored one; a corrupt or truncated entry is moved aside
and rebuilt, never loaded. A library that passes the check but still fails to
load (both files written wrong) is discarded the same way (`discard_library`).

The checksum guards against damage (a full disk, a crash mid-write), not
against tampering: anyone who can write to the cache can write a matching
checksum. What keeps foreign code out is the cache's ownership and mode
(cache_root.py: directories 0700, a root writable by others is refused) and
that names read from disk must be sha256 digests inside the root.

Concurrency: the build of one entry holds an exclusive `flock` on
`locks/<key>.lock`, so when several processes compile the same new source
at once, one runs the compiler and the others wait, then find its entry.
(The atomic rename still guards file systems where flock does not work.)
After a build the cache is trimmed to its size limit, least recently used
entries first (cache_usage.py); every hit refreshes the entry's time.

Release flags: `-O3 -march=native -fopenmp -shared -fPIC -std=c99`, plus
`-fno-math-errno` (no Python code reads errno; it lets sqrt vectorize),
`-fno-trapping-math` (nothing reads the floating-point exception flags; it lets
GCC evaluate both arms of a select, so a saturating float-to-integer cast
vectorizes: values are unchanged), `-fwrapv` (signed overflow wraps, as
numpy's integers do, instead of being undefined behaviour) and
`-fno-tree-loop-distribute-patterns`. The last keeps GCC from turning the loop
that zeroes a register tile's local accumulator array into a call to `memset`:
after such a call GCC no longer keeps the array in vector registers, so every
FMA of the tile read and wrote its accumulator through the stack. GCC 12 did
that on AVX2 for every tile size (MobileNetV2 in float32 took 5.6x its
time with the flag: docs/performance.md); the loops it would have replaced
by `memset` or `memcpy` are vectorized instead. GCC's loop unswitching
stays on although it is most of the compile time of kernels over run-time
sizes (a symbolic-length attention module: 17 s, 3-5 s with it limited):
limiting it left some of those kernels' tiles scalar (one limit made the
symbolic attention 16x slower), and its parameters differ between GCC
versions.

Debug builds (`debug=True`) use `-O1 -g -fno-var-tracking-assignments
-march=native -fno-omit-frame-pointer -fsanitize=undefined` (DEBUG_FLAGS says
why) together with the bounds checks codegen emits in debug
mode. UBSan's runtime can be dlopen()ed into an ordinary python, so debug
libraries load in-process. AddressSanitizer is opt-in (`asan=True`): its
runtime must be the first library of the process, and a python started
without it *exits* when an ASan library is loaded. So `CompiledModule`
refuses to load an ASan build unless libasan is already mapped, and says how
to run: `LD_PRELOAD=$(cc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
python ...` (the tests do exactly this in a subprocess).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from tensorkiln.errors import CompileError

from .cache_root import inside, make_private_dir, remove_aside, usable_root
from .cache_usage import FAILED, LOCKS, after_build, touch

CACHE_FORMAT = "1"  # bump when the entry layout or the ABI of generated code changes
# What GCC 14 and later refuse by default (the ones GCC 12 and Clang also know), refused by every version, so a
# generated call that passes one pointer type for another, or a helper used undeclared, fails on the compiler
# at hand rather than first on a newer one
C_ERRORS_OF_GCC_14 = ("-Werror=incompatible-pointer-types", "-Werror=implicit-function-declaration",
                      "-Werror=int-conversion", "-Werror=implicit-int")
RELEASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c99",
                 "-fno-math-errno", "-fno-trapping-math", "-fwrapv", "-fno-tree-loop-distribute-patterns",
                 *C_ERRORS_OF_GCC_14)
# -march=native as in a release build: the lowering chose kernels for this CPU (intrinsics of its vector
# extensions), which a compiler targeting plain x86-64 refuses to inline. -fno-var-tracking-assignments:
# with -g and UBSan at -O1, GCC 12's tracking of variables through the long straight-line transforms of a
# Winograd kernel took 124 s for one 72 KiB module (4 s without it; line tables and variables stay)
DEBUG_FLAGS = ("-O1", "-g", "-fno-var-tracking-assignments", "-march=native", "-fno-omit-frame-pointer",
               "-fsanitize=undefined", "-fopenmp", "-shared", "-fPIC", "-std=c99", "-fno-math-errno", "-fwrapv",
               *C_ERRORS_OF_GCC_14)
ASAN_FLAGS = ("-fsanitize=address",)
LINK_FLAGS = ("-lm",)

SOURCE_NAME = "module.c"
LIBRARY_NAME = "module.so"


@dataclass(frozen=True)
class CompiledLibrary:
    """A shared library in the cache, and how it was obtained."""

    path: str                # module.so
    source_path: str         # module.c, beside it
    key: str                 # the cache key (sha256 hex)
    seconds: float           # wall time of this call: compiling, or only looking up
    cache_hit: bool          # True when no compiler ran
    compile_seconds: float   # how long the compiler took when the entry was built
    flags: tuple[str, ...]
    debug: bool = False
    asan: bool = False


def find_c_compiler() -> Optional[str]:
    """The C compiler command to use ($CC, else cc, gcc or clang), or None when there is none."""
    configured = os.environ.get("CC", "").strip()
    candidates = [configured] if configured else ["cc", "gcc", "clang"]
    for command in candidates:
        words = shlex.split(command)
        if words and shutil.which(words[0]):
            return command
    return None


@functools.lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    """The compiler's `--version` text (part of the cache key)."""
    try:
        done = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise CompileError(f"cannot run the C compiler {cc!r}: {exc}") from exc
    return done.stdout.strip() or done.stderr.strip()


@functools.lru_cache(maxsize=None)
def cpu_features() -> str:
    """The CPU's feature flags (part of the cache key, since -march=native depends on them)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return " ".join(sorted(set(line.split(":", 1)[1].split())))
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


def cache_dir() -> Path:
    """The cache directory: $TENSORKILN_CACHE, else ~/.cache/tensorkiln, checked and created (cache_root.py).

    An unusable one gives way to a temporary directory for this process (with one warning).
    """
    return usable_root()


def build_flags(debug: bool = False, asan: bool = False, extra_flags: Sequence[str] = ()) -> tuple[str, ...]:
    """The compiler flags for a release or debug build."""
    flags = DEBUG_FLAGS if (debug or asan) else RELEASE_FLAGS
    if asan:
        flags = flags + ASAN_FLAGS
    return tuple(flags) + tuple(extra_flags)


def cache_key(source: str, cc: str, flags: Sequence[str]) -> str:
    """sha256 of the source, the compiler version, the flags and the CPU features."""
    h = hashlib.sha256()
    for part in (CACHE_FORMAT, source, compiler_version(cc), " ".join(flags), cpu_features()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry_is_valid(entry: Path) -> bool:
    """True when `entry` holds a library whose bytes match its recorded sha256."""
    try:
        recorded = (entry / (LIBRARY_NAME + ".sha256")).read_text().strip()
        return bool(recorded) and _file_sha256(entry / LIBRARY_NAME) == recorded
    except OSError:
        return False


def _run_compiler(cc: str, flags: Sequence[str], source: Path, output: Path) -> subprocess.CompletedProcess:
    """Invoke the C compiler (tests replace this to count or forbid compiler runs)."""
    command = [*shlex.split(cc), *flags, "-o", str(output), str(source), *LINK_FLAGS]
    return subprocess.run(command, capture_output=True, text=True, cwd=source.parent)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _publish(built: Path, entry: Path) -> None:
    """Move the finished build directory to `entry` atomically; keep a valid entry someone else published."""
    for _ in range(5):
        try:
            os.rename(built, entry)
            return
        except OSError:
            if entry_is_valid(entry):  # another process published the same library first
                _remove_tree(built)
                return
            remove_aside(entry)  # a corrupt or partial entry: move it aside (atomically) and retry
    raise CompileError(f"could not publish the compiled library to {entry}")


@contextlib.contextmanager
def entry_lock(cache: Path, key: str) -> Iterator[None]:
    """Hold an exclusive lock on building entry `key`: one process compiles, the others wait for it.

    The lock file is removed on release. A waiter may then hold a lock on a
    file that is no longer linked (and a newcomer lock a new one), so after
    locking we check that the locked file is still the one at the path, and
    try again otherwise. Where locking is impossible we go on unlocked: the
    atomic publish keeps that correct, only a compiler run may be repeated.
    """
    try:
        path = make_private_dir(cache / LOCKS) / f"{key}.lock"
    except OSError:
        path = None
    fd = _lock_file(path) if path is not None else None
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)  # before unlocking, so that nobody locks a file we then remove
            os.close(fd)


def _lock_file(path: Path) -> Optional[int]:
    """Open and exclusively lock the file at `path` (the one still linked there); None when locking fails."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return None
        try:
            locked, current = os.fstat(fd), os.stat(path)
            if (locked.st_dev, locked.st_ino) == (current.st_dev, current.st_ino):
                return fd
        except OSError:
            pass  # removed by the holder we waited for: lock the next file
        os.close(fd)


def discard_library(key: str, cache: Optional[Path] = None) -> None:
    """Move the entry `key` aside (and delete it): it fails to load although its checksum matched."""
    root = usable_root(cache)
    try:
        entry = inside(root, key)
    except ValueError:
        return
    remove_aside(entry)


def _record_failure(cache: Path, key: str, build: Path, stderr: str) -> Path:
    """Keep the failed source under cache/failed/<key>/ so the error can point at it."""
    failed = make_private_dir(cache / FAILED) / key
    (build / "compiler_output.txt").write_text(stderr)
    _remove_tree(failed)
    try:
        os.rename(build, failed)
    except OSError:  # a concurrent failure of the same source got there first: same content
        _remove_tree(build)
    return failed / SOURCE_NAME


def compile_c(source: str, *, debug: bool = False, asan: bool = False, extra_flags: Sequence[str] = (),
              cache: Optional[Path] = None, cc: Optional[str] = None) -> CompiledLibrary:
    """Compile C `source` to a shared library, or find it in the cache; raise CompileError on failure."""
    start = time.perf_counter()
    cc = cc or find_c_compiler()
    if cc is None:
        raise CompileError("no C compiler found: install gcc or clang, or set CC")
    flags = build_flags(debug, asan, extra_flags)
    cache = usable_root(cache)
    key = cache_key(source, cc, flags)
    entry = cache / key

    def result(hit: bool, compile_seconds: float) -> CompiledLibrary:
        return CompiledLibrary(str(entry / LIBRARY_NAME), str(entry / SOURCE_NAME), key,
                               time.perf_counter() - start, hit, compile_seconds, flags, debug, asan)

    if entry_is_valid(entry):
        touch(entry)
        return result(True, _recorded_compile_seconds(entry))
    with entry_lock(cache, key):
        if entry_is_valid(entry):  # built by the process that held the lock before us
            touch(entry)
            return result(True, _recorded_compile_seconds(entry))
        compile_seconds = _build(source, cc, flags, cache, key, debug or asan)
    after_build(cache, entry)
    return result(False, compile_seconds)


def _build(source: str, cc: str, flags: tuple[str, ...], cache: Path, key: str, debug: bool) -> float:
    """Compile `source` into a fresh directory and publish it as entry `key`; the compiler's seconds."""
    entry = cache / key
    build = Path(tempfile.mkdtemp(prefix=f".build-{key[:16]}-", dir=cache))
    try:
        source_path = build / SOURCE_NAME
        source_path.write_text(source)
        # Debug info names the final entry, not the temporary build directory, so gdb finds module.c.
        debug_map = (f"-fdebug-prefix-map={build}={entry}",) if debug else ()
        compile_start = time.perf_counter()
        done = _run_compiler(cc, flags + debug_map, source_path, build / LIBRARY_NAME)
        compile_seconds = time.perf_counter() - compile_start
        if done.returncode != 0 or not (build / LIBRARY_NAME).exists():
            failed_source = _record_failure(cache, key, build, done.stderr)
            first_error = next((line for line in done.stderr.splitlines() if "error" in line), "")
            raise CompileError(f"the C compiler ({cc}) rejected generated code: {first_error}".rstrip(": "),
                               source_path=str(failed_source), compiler_output=done.stderr)
        (build / (LIBRARY_NAME + ".sha256")).write_text(_file_sha256(build / LIBRARY_NAME) + "\n")
        (build / "build.json").write_text(json.dumps({
            "compiler": cc, "compiler_version": compiler_version(cc).splitlines()[0],
            "flags": list(flags), "compile_seconds": compile_seconds,
            "warnings": done.stderr,
        }, indent=1))
        _publish(build, entry)
    finally:
        if build.exists():
            _remove_tree(build)
    return compile_seconds


def cached_library(key: str, *, debug: bool = False, cache: Optional[Path] = None) -> Optional[CompiledLibrary]:
    """The valid cache entry named `key` (a `CompiledLibrary.key`), or None when it is gone or corrupt.

    `key` may come from a file on disk: anything but a sha256 digest naming a directory inside
    the cache is treated as missing, so a record cannot point the loader elsewhere.
    """
    start = time.perf_counter()
    try:
        entry = inside(usable_root(cache), key)
    except ValueError:
        return None
    if not entry_is_valid(entry):
        return None
    touch(entry)
    return CompiledLibrary(str(entry / LIBRARY_NAME), str(entry / SOURCE_NAME), key, time.perf_counter() - start,
                           True, _recorded_compile_seconds(entry), build_flags(debug), debug)


def recorded_compile_seconds(library_path: str) -> float:
    """The C compiler's seconds recorded when the cached library at `library_path` was built (0.0 when
    unknown): what compiling that source costs, even where this process found it in the cache."""
    return _recorded_compile_seconds(Path(library_path).parent)


def _recorded_compile_seconds(entry: Path) -> float:
    try:
        return float(json.loads((entry / "build.json").read_text())["compile_seconds"])
    except (OSError, ValueError, KeyError):
        return 0.0
