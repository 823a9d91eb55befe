"""CompiledModule: a loaded library and its entry, called with numpy arrays in one foreign call.

`CompiledModule(library, signature, constants)` loads the shared library with
ctypes, checks that its embedded signature matches `signature`, binds the
constants (weights) once, and allocates the arena of intermediates once.
Calling it with the inputs and preallocated outputs:

1. checks every array's type, dtype, shape, C-contiguity (and outputs'
   writability and non-overlap with any other argument, since the generated
   code declares its pointers `restrict`) before any native code runs, and
   raises an error naming the argument otherwise (DTypeError, ShapeError,
   or TypeError/ValueError for a non-array, a strided or read-only array);
2. writes the pointers into a ctypes array made once at load time (the slot
   of an array passed again by identity is not even rewritten: the module
   holds a reference to the last array in each slot, which also keeps the
   pointer valid);
3. makes exactly one foreign call, `tk_entry(args, arena)`.

CompiledGraph (driver/executable.py), which knows its arrays pass step 1 from
identity comparisons with the dtypes and shapes it checked once, calls
`call_checked` instead: steps 2 and 3 only, under `lock`. Warm calls of
tk.jit functions go through `native_caller`'s C caller instead (fastcall.py):
the same steps for arrays that pass as they are, in about 1 us.

Per-call overhead, measured with timeit (best of 5 x 200,000 calls) on this
project's 2-core AVX2 machine, Python 3.11, numpy 2, for an entry that does
almost no work (2 float32[4] inputs, 1 output): a bare ctypes call of the
entry costs about 0.24 us; `module(*arrays)` about 1.3 us when the same
arrays are passed again, and about 2.9 us with different arrays every call
(getting an array's address is the expensive part). A kernel with an OpenMP
parallel loop adds the thread team's fork/join inside the native call:
about 0.7 us per parallel loop on this machine when it is otherwise idle.

One module is not re-entrant: calls from several threads are serialized by a
lock, because they share the pointer array and the arena.
"""
from __future__ import annotations

import _ctypes
import ctypes
import threading
from typing import Mapping, Optional, Sequence

import numpy as np

from tensorkiln.errors import DTypeError, ShapeError, TensorKilnError
from tensorkiln.runtime import fastcall, hooks
from tensorkiln.runtime.signature import ArgSpec, Signature, numpy_dtypes

TK_ERR_INDEX = 1
TK_ERR_ALLOC = 2
ARENA_ALIGNMENT = 64


class KernelError(TensorKilnError, RuntimeError):
    """Generated code reported a failure at run time (the message says where)."""


class OutOfBoundsError(KernelError, IndexError):
    """A debug build caught an index outside its buffer."""


class LibraryLoadError(TensorKilnError, OSError):
    """The file is no loadable tensorkiln library (truncated, empty, or not ours): rebuild it."""


class ArenaAllocationError(TensorKilnError, MemoryError):
    """The arena of a compiled graph's intermediates could not be allocated."""


def asan_runtime_loaded() -> bool:
    """True when AddressSanitizer's runtime is mapped into this process (so ASan builds may load)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return "libasan" in f.read()
    except OSError:
        return False


def _address(array: np.ndarray) -> int:
    """Address of the first element (fast path through the buffer protocol; numpy's otherwise)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):  # read-only or empty arrays
        return array.ctypes.data


_pinned: list[ctypes.CDLL] = []  # the OpenMP runtime, held open for the life of the process


def _load_library(path: str) -> ctypes.CDLL:
    """dlopen `path`; a file the loader rejects ("file too short", bad ELF) is a LibraryLoadError."""
    try:
        library = ctypes.CDLL(path)
    except OSError as exc:
        raise LibraryLoadError(f"cannot load {path}: {exc}") from exc
    if not _pinned:
        _pin_openmp_runtime()
    return library


def _pin_openmp_runtime() -> None:
    """Open libgomp once more, so unloading a released library never unloads it: its idle
    worker threads wait inside it, and would crash if its code were unmapped under them."""
    try:
        _pinned.append(ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL))
    except OSError:  # not linked against libgomp (a build without OpenMP): nothing to keep open
        _pinned.append(None)


class CompiledModule:
    """A loaded library: call it with inputs then outputs (numpy arrays); one native call per call."""

    def __init__(self, library_path: str, signature: Signature,
                 constants: Optional[Mapping[str, np.ndarray]] = None, *,
                 source_path: Optional[str] = None, compile_seconds: float = 0.0,
                 cache_hit: bool = False, asan: bool = False, name: Optional[str] = None):
        """Load `library_path`, verify it matches `signature`, bind `constants` by name.

        `compile_seconds` and `cache_hit` are kept for reports (the time the build or
        cache lookup took, and whether the compiler ran); `name` (the graph's) is
        what errors call this module.
        """
        if asan and not asan_runtime_loaded():
            raise TensorKilnError(
                "this library was built with AddressSanitizer, whose runtime must be loaded first: run python "
                "as `LD_PRELOAD=$(cc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 python ...`"
            )
        self.library_path = library_path
        self.name = name or f"library {library_path}"
        self.signature = signature
        self.source_path = source_path
        self.compile_seconds = compile_seconds
        self.cache_hit = cache_hit
        self._lib = _load_library(library_path)
        self._check_embedded_signature()
        hooks.install(self._lib)
        # int tk_entry(void **args, void *arena). No argtypes: the arguments are always the pointer
        # array and the arena's c_void_p, which ctypes passes as they are instead of converting
        # them (half the cost of a call).
        self._entry = self._lib.tk_entry
        self._entry.restype = ctypes.c_int
        self._last_error = self._lib.tk_last_error
        self._last_error.restype = ctypes.c_char_p
        self._last_error.argtypes = []

        # Per-call arguments (inputs + outputs); constants follow them in the pointer array.
        self._call_specs: tuple[ArgSpec, ...] = signature.inputs + signature.outputs
        self._n_inputs = len(signature.inputs)
        # a program with size symbols takes one more pointer: the int64 array of their values
        self._pointers = (ctypes.c_void_p * max(len(signature.args) + bool(signature.sizes), 1))()
        self._slot_arrays: list[Optional[np.ndarray]] = [None] * len(self._call_specs)
        self._addresses: list[int] = [0] * len(self._call_specs)
        self._nbytes = tuple(spec.size * numpy_dtypes(spec.dtype)[0].itemsize
                             if all(isinstance(d, int) for d in spec.shape) else 0 for spec in self._call_specs)
        self._dtypes = [numpy_dtypes(spec.dtype) for spec in self._call_specs]
        self._lock = threading.Lock()
        self._constants = self._bind_constants(constants or {})
        self._sizes: Optional[np.ndarray] = None  # the sizes array last passed to call_sized (kept alive)
        self._arena_raw, self._arena, self._arena_pointer = self._allocate_arena(signature.arena_bytes)

    # ---- loading

    def _allocate_arena(self, nbytes: int) -> tuple[np.ndarray, np.ndarray, ctypes.c_void_p]:
        """The arena of intermediates, allocated once and aligned by hand (numpy only guarantees 16 bytes):
        (the raw array, which keeps the memory alive, the aligned view, its address)."""
        try:
            raw = np.zeros(nbytes + ARENA_ALIGNMENT, dtype=np.uint8)
        except (MemoryError, ValueError) as err:  # ValueError: a size numpy cannot even represent
            raise ArenaAllocationError(
                f"cannot allocate the arena of intermediates of {self.name}: it needs {nbytes:,} bytes "
                f"({nbytes / 2 ** 20:,.1f} MiB) ({type(err).__name__}: {err})") from err
        shift = (-raw.ctypes.data) % ARENA_ALIGNMENT
        return raw, raw[shift:shift + nbytes], ctypes.c_void_p(raw.ctypes.data + shift)

    def _check_embedded_signature(self) -> None:
        try:
            get = self._lib.tk_signature
        except AttributeError as exc:  # a shared library, but not one tensorkiln generated
            raise LibraryLoadError(f"{self.library_path} has no tk_signature: not a tensorkiln library") from exc
        get.restype = ctypes.c_char_p
        get.argtypes = []
        embedded = get().decode()
        if embedded != self.signature.encode():
            raise TensorKilnError(
                f"library {self.library_path} was built for another signature:\n"
                f"  library:  {embedded}\n  expected: {self.signature.encode()}"
            )

    def _bind_constants(self, constants: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        expected = {spec.name for spec in self.signature.constants}
        unknown = set(constants) - expected
        missing = expected - set(constants)
        if unknown or missing:
            raise TensorKilnError(
                f"constants do not match the signature: missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        bound = {}
        self._constant_ranges: list[tuple[int, int, str]] = []
        offset = len(self._call_specs)
        for i, spec in enumerate(self.signature.constants):
            # Kept by reference, not copied, when already contiguous and of the right dtype:
            # the caller must not modify a constant afterwards.
            array = np.asarray(constants[spec.name], order="C")
            self._check(array, spec, numpy_dtypes(spec.dtype), writable=False)
            bound[spec.name] = array
            address = array.ctypes.data
            self._pointers[offset + i] = address
            self._constant_ranges.append((address, address + array.nbytes, f"constant {spec.name}"))
        return bound

    # ---- calling

    def _check(self, array: object, spec: ArgSpec, dtypes: tuple[np.dtype, ...], writable: bool) -> None:
        """Raise a clear error unless `array` can be passed as `spec`."""
        what = f"{spec.role} {spec.name}"
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{what}: expected a numpy array, got {type(array).__name__}")
        if array.dtype not in dtypes:
            raise DTypeError(f"{what}: expected dtype {spec.dtype} ({', '.join(map(str, dtypes))}), "
                             f"got {array.dtype}")
        if array.shape != spec.shape:
            raise ShapeError(f"{what}: expected shape {spec.shape}, got {array.shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}: array must be C-contiguous (use np.ascontiguousarray)")
        if writable and not array.flags.writeable:
            raise ValueError(f"{what}: output array is read-only")

    @property
    def lock(self) -> threading.Lock:
        """The lock that serializes calls (they share the pointer array and the arena).

        A caller that has already checked its arrays holds it around `call_checked`.
        """
        return self._lock

    def check_arguments(self, arrays: Sequence[object], fresh_outputs: bool = False) -> None:
        """Raise a clear error unless `arrays` (inputs, then outputs) can be passed to the entry.

        fresh_outputs=True: the outputs were allocated by the caller with their spec's
        dtype and shape, so only the inputs are checked.
        """
        specs = self._call_specs
        if len(arrays) != len(specs):
            names = ", ".join(s.name for s in specs)
            raise TypeError(f"expected {len(specs)} arrays ({names}), got {len(arrays)}")
        self._check_arrays(arrays[:self._n_inputs] if fresh_outputs else arrays)

    def check_inputs(self, inputs: Sequence[object]) -> None:
        """Raise a clear error unless `inputs` can be passed as the entry's inputs."""
        if len(inputs) != self._n_inputs:
            names = ", ".join(s.name for s in self.signature.inputs)
            raise TypeError(f"expected {self._n_inputs} input arrays ({names}), got {len(inputs)}")
        self._check_arrays(inputs)

    def _check_arrays(self, arrays: Sequence[object]) -> None:
        """_check each of the first len(arrays) arguments (outputs must be writable too)."""
        specs, dtypes, n_inputs = self._call_specs, self._dtypes, self._n_inputs
        for i, array in enumerate(arrays):
            # Checked on every call, even for an array seen before: numpy lets
            # shape, strides, dtype and writability change in place.
            if (type(array) is not np.ndarray or array.dtype not in dtypes[i] or array.shape != specs[i].shape
                    or not array.flags.c_contiguous or (i >= n_inputs and not array.flags.writeable)):
                self._check(array, specs[i], dtypes[i], writable=i >= n_inputs)

    def __call__(self, *arrays: np.ndarray, fresh_outputs: bool = False) -> None:
        """Run the program: `module(*inputs, *outputs)`; outputs are written in place.

        fresh_outputs=True promises the outputs were just allocated by the caller,
        so they cannot overlap anything and the overlap check is skipped.
        """
        self.check_arguments(arrays, fresh_outputs)
        with self._lock:
            changed = self._set_pointers(arrays)
            if changed and not fresh_outputs:
                self._check_overlap()
            status = self._entry(self._pointers, self._arena_pointer)
        if status:
            self._raise_failure(status)

    def call_checked(self, arrays: Sequence[np.ndarray]) -> None:
        """Run the program on arrays (inputs, then outputs) that pass `check_arguments(arrays, True)`.

        The caller holds `lock`, has checked the arrays (or knows them to pass
        from identity comparisons with the dtypes and shapes they were checked
        for) and promises the outputs overlap nothing they may not: no check
        runs here, only the pointers of arrays not seen in their slot last time
        are written, then the one foreign call.
        """
        slots = self._slot_arrays
        for i, array in enumerate(arrays):
            if array is not slots[i]:
                self._set_pointers(arrays)
                break
        status = self._entry(self._pointers, self._arena_pointer)
        if status:
            self._raise_failure(status)

    def call_sized(self, arrays: Sequence[np.ndarray], sizes: np.ndarray, arena_bytes: int) -> None:
        """Run a program with size symbols: `sizes` (int64, in signature.sizes order) are this call's
        values, `arena_bytes` the arena they need (it grows when a call needs more).

        As `call_checked`: the caller holds `lock` and has checked the arrays against the
        shapes the sizes give; the outputs are fresh or recycled arrays of those shapes.
        """
        if self._lib is None:
            self._entry()  # released: raises, naming the program
        if arena_bytes > len(self._arena):
            # the pointer object is updated in place: sized C callers read the arena's address from it
            self._arena_raw, self._arena, grown = self._allocate_arena(arena_bytes)
            self._arena_pointer.value = grown.value
        slots = self._slot_arrays
        for i, array in enumerate(arrays):
            if array is not slots[i]:
                self._set_pointers(arrays)
                break
        if sizes is not self._sizes:  # the same array for a shape seen before: its address is in place
            self._sizes = sizes
            self._pointers[len(self.signature.args)] = sizes.ctypes.data
        status = self._entry(self._pointers, self._arena_pointer)
        if status:
            self._raise_failure(status)

    @property
    def arena_capacity(self) -> int:
        """Bytes of the arena allocated now (a symbolic program's grows to the largest call's need)."""
        return len(self._arena)

    def _set_pointers(self, arrays: Sequence[np.ndarray]) -> bool:
        """Write the address of each array not already in its slot; True when any was new."""
        slots = self._slot_arrays
        changed = False
        for i, array in enumerate(arrays):
            if array is not slots[i]:
                # Getting an address costs far more than the checks: reuse it for the
                # same object (whose buffer our reference keeps from being reallocated).
                address = _address(array)
                self._pointers[i] = address
                self._addresses[i] = address
                slots[i] = array
                changed = True
        return changed

    def _check_overlap(self) -> None:
        """Outputs must not share memory with any other argument (the C code uses restrict)."""
        addresses, nbytes = self._addresses, self._nbytes
        for i in range(self._n_inputs, len(addresses)):
            start = addresses[i]
            end = start + nbytes[i]
            for j, other in enumerate(addresses):
                if j != i and other < end and start < other + nbytes[j] and nbytes[j] and nbytes[i]:
                    self._overlap_error(i, self._call_specs[j].name)
            for other_start, other_end, name in self._constant_ranges:
                if other_start < end and start < other_end and nbytes[i]:
                    self._overlap_error(i, name)

    def _overlap_error(self, output: int, other: str) -> None:
        self._slot_arrays = [None] * len(self._slot_arrays)  # check everything again on the next call
        raise ValueError(f"output {self._call_specs[output].name} overlaps {other} in memory; "
                         "pass separate arrays")

    def _raise_failure(self, status: int) -> None:
        failure = hooks.take_failure() if status == hooks.TK_ERR_RUNTIME else None
        if failure is not None:  # a runtime call (a collective) failed: its own error, not a generic one
            raise failure
        message = (self._last_error() or b"").decode(errors="replace") or f"generated code failed ({status})"
        if status == TK_ERR_INDEX:
            raise OutOfBoundsError(message)
        raise KernelError(message)

    def kernel_seconds(self, kernels: int) -> list[float]:
        """Seconds spent in each of the `kernels` kernels since the last read (profiling builds only)."""
        read = getattr(self._lib, "tk_profile_read", None)
        if read is None:
            raise TensorKilnError("this library was not built for profiling (build(..., profile=True))")
        seconds = (ctypes.c_double * max(kernels, 1))()
        read.restype = None
        read(seconds)
        return list(seconds)[:kernels]

    def run(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run on `inputs`, allocating fresh outputs, and return them."""
        outputs = tuple(np.empty(spec.shape, dtype=numpy_dtypes(spec.dtype)[0]) for spec in self.signature.outputs)
        self(*inputs, *outputs)
        return outputs

    def native_caller(self, input_dtypes: Sequence[np.dtype], tensor_type: type):
        """A C caller of this program for warm calls (runtime/fastcall.py): caller(*inputs) returns the
        output arrays, or None when the inputs are not exactly `input_dtypes` and the signature's shapes
        (C-contiguous ndarrays, or eager `tensor_type` instances holding one). None where the extension
        cannot be built."""
        return self._caller(input_dtypes, tuple(tuple(spec.shape) for spec in self.signature.inputs),
                            tuple(tuple(spec.shape) for spec in self.signature.outputs), (), tensor_type)

    def sized_caller(self, input_dtypes: Sequence[np.dtype], input_shapes: tuple, output_shapes: tuple,
                     sizes: np.ndarray, tensor_type: type):
        """A C caller of a program with size symbols for calls whose inputs have exactly `input_shapes`:
        `sizes` (int64, what `call_sized` takes for them; the caller of this keeps it alive) and the
        outputs' shapes are fixed, the arena's address is read at each call (it grows in place).
        None where the extension cannot be built."""
        return self._caller(input_dtypes, input_shapes, output_shapes, (sizes.ctypes.data,), tensor_type,
                            indirect_arena=True)

    def _caller(self, input_dtypes, input_shapes, output_shapes, extra_pointers: tuple, tensor_type: type,
                indirect_arena: bool = False):
        extension = fastcall.extension()
        if extension is None or self._lib is None:
            return None
        n_call = len(self._call_specs)
        constants = tuple(self._pointers[n_call + i] or 0 for i in range(len(self.signature.constants)))
        entry = ctypes.cast(self._entry, ctypes.c_void_p).value
        output_dtypes = tuple(numpy_dtypes(spec.dtype)[0] for spec in self.signature.outputs)
        cell = (ctypes.addressof(self._arena_pointer), self._arena_pointer) if indirect_arena else ()
        return extension.Caller(entry, self._arena_pointer.value or 0, tuple(input_dtypes), input_shapes,
                                output_dtypes, output_shapes, constants + extra_pointers, self._lock,
                                self._raise_failure, tensor_type, *cell)

    def release(self) -> None:
        """Unload the library and free the arena; a later call raises TensorKilnError, never crashes.

        For caches that bound how many compiled programs a process holds (tk.jit's cache_limit).
        """
        with self._lock:
            if self._lib is None:
                return
            handle = self._lib._handle
            name = self.name

            def released(*_args):
                raise TensorKilnError(f"{name} was released (evicted from its function's cache of "
                                      "compiled programs) and cannot run any more")

            self._entry = released
            self._lib = self._last_error = None
            self._slot_arrays = [None] * len(self._slot_arrays)
            self._constants = {}
            self._arena_raw = self._arena = None
            self._arena_pointer = ctypes.c_void_p(0)
            _ctypes.dlclose(handle)

    @property
    def released(self) -> bool:
        """True once `release` has unloaded the library."""
        return self._lib is None

    def __repr__(self) -> str:
        ins = ", ".join(a.describe() for a in self.signature.inputs)
        outs = ", ".join(a.describe() for a in self.signature.outputs)
        return f"<CompiledModule ({ins}) -> ({outs}) from {self.library_path}>"
