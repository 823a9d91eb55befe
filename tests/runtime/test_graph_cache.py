"""The compiled-graph cache: hits skip lowering and codegen, and never serve another graph's library."""
import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.kernels.lower as lower_module
from tensorkiln.ir.fingerprint import fingerprint as graph_fingerprint
from tensorkiln.runtime.graph_cache import load_entry
from tensorkiln.kernels.templates.conv import forced_conv_algorithm
from tensorkiln.runtime.signature import ArgSpec, Signature


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))
    return tmp_path


def _forbid_lowering(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("lowered although the graph was cached")
    monkeypatch.setattr(lower_module, "lower_graph", refuse)


def _count_lowerings(monkeypatch) -> list:
    calls = []
    original = lower_module.lower_graph

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(lower_module, "lower_graph", counted)
    return calls


def _model(weight):
    def f(x):
        return (x @ tk.tensor(weight)).relu().sum(1)
    return f


def test_second_compile_is_a_hit_without_lowering(cache, monkeypatch):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    first = tk.jit(_model(w))
    expected = first(x).numpy()
    assert not first.report(x).cache_hit
    _forbid_lowering(monkeypatch)
    second = tk.jit(_model(w))
    np.testing.assert_array_equal(second(x).numpy(), expected)
    report = second.report(x)
    assert report.cache_hit
    assert [k.name for k in report.kernels] == [k.name for k in first.report(x).kernels]
    assert report.arena_bytes == first.report(x).arena_bytes


def test_other_constants_or_shapes_miss(cache, monkeypatch):
    lowerings = _count_lowerings(monkeypatch)
    rng = np.random.default_rng(1)
    w1, w2 = (rng.standard_normal((16, 8)).astype(np.float32) for _ in range(2))
    x = rng.standard_normal((4, 16)).astype(np.float32)
    tk.jit(_model(w1))(x)
    g = tk.jit(_model(w2))
    np.testing.assert_allclose(g(x).numpy(), np.maximum(x @ w2, 0).sum(1), rtol=1e-5)
    assert len(lowerings) == 2
    x7 = rng.standard_normal((7, 16)).astype(np.float32)
    h = tk.jit(_model(w1))
    np.testing.assert_allclose(h(x7).numpy(), np.maximum(x7 @ w1, 0).sum(1), rtol=1e-5)
    assert len(lowerings) == 3


def test_fingerprint_ignores_source_lines_but_not_structure():
    x = tk.tensor(np.ones((3, 5), np.float32))

    def traced(fn):
        return tk.jit(fn).optimized_graph(x)

    a = traced(lambda t: (t * 2).exp())
    b = traced(lambda t: (t * 2).exp())   # the same ops from another line
    c = traced(lambda t: (t * 3).exp())
    d = traced(lambda t: (t * 2).tanh())
    assert graph_fingerprint(a) == graph_fingerprint(b)
    assert len({graph_fingerprint(g) for g in (a, c, d)}) == 3


def test_a_lost_library_is_rebuilt(cache, monkeypatch):
    import shutil
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = tk.jit(lambda t: t.softmax(-1))
    f(x)
    shutil.rmtree(cache / f.report(x).library_path.split("/")[-2])
    lowerings = _count_lowerings(monkeypatch)
    g = tk.jit(lambda t: t.softmax(-1))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(g(x).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-6)
    assert len(lowerings) == 1 and not g.report(x).cache_hit


def test_a_corrupt_entry_is_a_miss(cache):
    x = np.ones((2, 3), np.float32)
    tk.jit(lambda t: t + 1)(x)
    (entry,) = (cache / "graphs").glob("*.json")
    entry.write_text("{not json")
    assert load_entry(entry.stem) is None
    g = tk.jit(lambda t: t + 1)
    np.testing.assert_array_equal(g(x).numpy(), x + 1)


def test_forced_algorithm_is_part_of_the_key(cache, monkeypatch):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 4, 10, 10)).astype(np.float32)

    def conv(t):
        return tk.nn.functional.conv2d(t, tk.tensor(w), padding=1)

    plain = tk.jit(conv)
    expected = plain(x).numpy()
    lowerings = _count_lowerings(monkeypatch)
    with forced_conv_algorithm("direct"):
        forced = tk.jit(conv)
        np.testing.assert_allclose(forced(x).numpy(), expected, rtol=1e-4, atol=1e-4)
    assert len(lowerings) == 1


def test_profile_and_loop_ir_after_a_hit(cache):
    x = np.ones((64, 64), np.float32)
    tk.jit(lambda t: (t @ t).relu())(x)
    g = tk.jit(lambda t: (t @ t).relu())
    g(x)
    compiled = next(iter(g._cache.values())).compiled
    assert compiled.report.cache_hit and compiled.lowered.program.kernels
    profile = g.profile(x, repeat=2)
    assert len(profile.kernels) == len(g.report(x).kernels)


def test_in_place_updates_survive_a_hit(cache):
    from tensorkiln.tools.demo_models import transformer_block
    model = transformer_block()
    expected = tk.jit(model.forward)(*model.inputs).numpy()
    again = tk.jit(model.forward)
    np.testing.assert_array_equal(again(*model.inputs).numpy(), expected)
    assert again.report(*model.inputs).cache_hit


def test_signature_round_trips_through_its_text():
    signature = Signature((ArgSpec("in_x", "float32", (2, 3), "input"),),
                          (ArgSpec("out0", "bool", (), "output"),),
                          (ArgSpec("c0", "int64", (1, 5, 1), "constant"),), arena_bytes=4096)
    assert Signature.decode(signature.encode()) == signature


MALFORMED = {
    "a list": lambda entry: [entry],
    "kernels of the wrong type": lambda entry: {**entry, "kernels": "none"},
    "a kernel missing a field": lambda entry: {**entry, "kernels": [{"name": "k"}]},
    "in_place a list": lambda entry: {**entry, "in_place": [1, 2]},
    "a field missing": lambda entry: {k: v for k, v in entry.items() if k != "arena_bytes"},
    "a byte count as text": lambda entry: {**entry, "naive_bytes": "12"},
    "a signature not a string": lambda entry: {**entry, "signature": 5},
    "a library key not a digest": lambda entry: {**entry, "library_key": 12},
}


@pytest.mark.parametrize("damage", sorted(MALFORMED))
def test_a_malformed_record_is_a_miss_rebuilt_and_moved_aside(cache, monkeypatch, damage):
    import json
    x = np.full((2, 3), 2.0, np.float32)
    tk.jit(lambda t: t * 3 + 1)(x)
    (record,) = (cache / "graphs").glob("*.json")
    record.write_text(json.dumps(MALFORMED[damage](json.loads(record.read_text()))))
    assert load_entry(record.stem) is None
    assert not record.exists() and (cache / "failed" / f"graph-{record.name}").exists()
    record.write_text(json.dumps(MALFORMED[damage](json.loads((cache / "failed" / f"graph-{record.name}")
                                                               .read_text()))))
    lowerings = _count_lowerings(monkeypatch)
    for _ in range(2):  # rebuilt once, then a hit again
        g = tk.jit(lambda t: t * 3 + 1)
        np.testing.assert_array_equal(g(x).numpy(), x * 3 + 1)
    assert len(lowerings) == 1 and g.report(x).cache_hit
    assert load_entry(record.stem) is not None


def _foreign_library(directory, marker) -> None:
    """A shared library whose constructor leaves `marker` behind, with a matching checksum beside it."""
    import hashlib
    import subprocess
    directory.mkdir()
    source = directory / "evil.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) '
                      f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(directory / "module.so"), str(source)], check=True)
    digest = hashlib.sha256((directory / "module.so").read_bytes()).hexdigest()
    (directory / "module.so.sha256").write_text(digest + "\n")


def test_a_record_cannot_point_at_a_library_outside_the_cache(tmp_path, monkeypatch):
    import json
    cache = tmp_path / "cache"
    monkeypatch.setenv("TENSORKILN_CACHE", str(cache))
    marker = tmp_path / "constructor-ran"
    _foreign_library(tmp_path / "evil_lib", marker)
    x = np.full((2, 3), 2.0, np.float32)
    tk.jit(lambda t: t * 5 - 1)(x)
    (record,) = (cache / "graphs").glob("*.json")
    entry = json.loads(record.read_text())
    record.write_text(json.dumps({**entry, "library_key": "../evil_lib"}))
    g = tk.jit(lambda t: t * 5 - 1)
    np.testing.assert_array_equal(g(x).numpy(), x * 5 - 1)
    assert not marker.exists()
