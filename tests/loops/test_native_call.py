"""NativeCall: a C helper called from loop IR on buffer pointers, checked, printed and generated once."""
from __future__ import annotations

import pytest

from tensorkiln.codegen.c import generate_c
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import For, Kernel, LoopIRError, NativeCall, Pointer, verify_kernel
from tensorkiln.loops.program import Program

HELPER = ("static void tk_copy_rows(const float *src, float *dst, int64_t n)\n"
          "{ for (int64_t i = 0; i < n; i++) dst[i] = src[i]; }")


def _kernel(name="copy", dst_buffer=None, rows=4):
    src, dst = Buffer("src", "float32", (4, 8)), dst_buffer or Buffer("dst", "float32", (4, 8))
    r = E.Var("r")
    call = NativeCall("tk_copy_rows", (Pointer(src, r * 8), Pointer(dst, r * 8), E.const(8)), ("dst",), HELPER)
    return Kernel(name, (src, dst), For(r, rows, call)), src, dst


def test_native_call_is_verified_printed_and_writes_its_buffer():
    kernel, _, _ = _kernel()
    verify_kernel(kernel)
    assert "native tk_copy_rows(&src[r*8], &dst[r*8], 8)" in str(kernel)
    assert kernel.written_buffers() == {"dst"}


def test_native_call_refuses_writes_to_a_buffer_it_has_no_pointer_to():
    src = Buffer("src", "float32", (4,))
    with pytest.raises(LoopIRError, match="dst"):
        NativeCall("tk_copy_rows", (Pointer(src, E.const(0)),), ("dst",), HELPER)


def test_native_call_of_an_unknown_buffer_fails_verification():
    other = Buffer("other", "float32", (4, 8))
    kernel, src, dst = _kernel()
    bad = Kernel("bad", (src, dst), NativeCall("tk_copy_rows", (Pointer(other, E.const(0)), Pointer(dst, E.const(0)),
                                                                E.const(8)), ("dst",), HELPER))
    with pytest.raises(LoopIRError, match="other"):
        verify_kernel(bad)


def test_generated_c_defines_the_helper_once_and_calls_it():
    first, src, dst = _kernel("first")
    second, _, _ = _kernel("second", rows=3)  # another function (the same one would be shared: c_shared.py)
    program = Program("p", [first, second], inputs=(src,), outputs=(dst,))
    code = generate_c(program).text
    assert code.count("static void tk_copy_rows(") == 1
    assert code.count("tk_copy_rows(&src[") == 2
