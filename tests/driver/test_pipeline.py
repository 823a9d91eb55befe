"""The compile pipeline: tk.compile, the named stages, their dumps, and CompileOptions as the one
place the options are checked and read (tensorkiln/driver/)."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.grouping import partition
from tensorkiln.kernels.lower import lower_graph
from tensorkiln.driver.options import CompileOptions
from tensorkiln.driver.stages import STAGES
from tensorkiln.runtime.c_compiler import find_c_compiler

PACKAGE = Path(tk.__file__).resolve().parent
needs_cc = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")


def _model(x, w):
    return (x @ w).relu().softmax(-1)


def _args():
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)


# ---- tk.compile --------------------------------------------------------------------------------------
def test_compile_is_a_function_that_matches_jit():
    assert callable(tk.compile) and not isinstance(tk.compile, type(tk))
    x, w = _args()
    np.testing.assert_array_equal(tk.compile(_model)(x, w).numpy(), tk.jit(_model)(x, w).numpy())


def test_compile_as_a_decorator_with_and_without_arguments():
    @tk.compile
    def a(x):
        return x * 2 + 1

    @tk.compile(opt_level=0, fast_math=True)
    def b(x):
        return x - x

    assert a.__name__ == "a" and a(tk.ones(3)).tolist() == [3.0] * 3
    assert b.options == CompileOptions(opt_level=0, fast_math=True)
    assert b(tk.ones(2)).tolist() == [0.0, 0.0]


# ---- CompileOptions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, error, match", [
    (dict(opt_level=4), ValueError, "opt_level"),
    (dict(opt_level=-1), ValueError, "opt_level"),
    (dict(opt_level=True), ValueError, "opt_level"),
    (dict(opt_level="2"), ValueError, "opt_level"),
    (dict(backend="cuda"), ValueError, "backend"),
    (dict(debug="yes"), TypeError, "debug"),
    (dict(fast_math=1), TypeError, "fast_math"),
    (dict(donate_argnums=-1), ValueError, "donate_argnums"),
    (dict(donate_argnums=(0, "x")), ValueError, "donate_argnums"),
])
def test_compile_options_reject_bad_values(bad, error, match):
    with pytest.raises(error, match=match):
        CompileOptions(**bad)
    with pytest.raises(error, match=match):  # at decoration time, before any trace
        tk.jit(lambda x: x, **bad)


def test_compile_options_defaults_and_environment(monkeypatch):
    options = CompileOptions(donate_argnums=1)
    assert options.donate_argnums == frozenset({1}) and options.opt_level == 2 and options.backend == "c"
    monkeypatch.setenv("TENSORKILN_DEBUG", "1")
    monkeypatch.setenv("TENSORKILN_DUMP_IR", "/some/dir")
    resolved = options.resolved()
    assert resolved.debug is True and resolved.dump_dir == "/some/dir"
    assert CompileOptions(debug=False).resolved().debug is False  # an explicit value wins
    assert not CompileOptions(opt_level=0).fuse and CompileOptions(opt_level=1).fuse


def _code_strings(tree: ast.AST) -> list[str]:
    """String constants that are not docstrings."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def _named(node: ast.AST, names: set[str]) -> bool:
    return (isinstance(node, ast.Name) and node.id in names) or (isinstance(node, ast.Attribute) and node.attr in names)


# Modules that may touch the options besides driver/options.py, and why.
OPTION_READERS = {
    "driver/stages.py": "hands each stage the value it needs from the CompileOptions",
    "importers/torch/backend.py": "forwards the torch.compile backend's own options to tk.jit",
}
# Modules that receive opt_level as an argument and decide by it.
LEVEL_USERS = {"passes/__init__.py": "the passes of each optimization level"}


def option_reads(package: Path = PACKAGE) -> list[str]:
    """Where the options are read, checked or taken from the environment outside driver/options.py."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if name == "driver/options.py":
            continue
        tree = ast.parse(path.read_text())
        for text in _code_strings(tree):
            if text in ("TENSORKILN_DEBUG", "TENSORKILN_DUMP_IR") or "opt_level must" in text \
                    or "backend must" in text or "donate_argnums must" in text:
                found.append(f"{name}: reads or checks an option ({text!r})")
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(_named(n, {"opt_level"}) for n in [node.left, *node.comparators]) \
                    and name not in LEVEL_USERS:
                found.append(f"{name}:{node.lineno}: decides by opt_level")
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) \
                    and node.attr in ("opt_level", "fast_math") and name not in OPTION_READERS:
                found.append(f"{name}:{node.lineno}: reads .{node.attr}")
    return found


def test_options_are_read_only_in_the_options_module():
    assert option_reads() == []


def test_the_option_check_finds_a_stray_read(tmp_path):
    for name in ("driver/options.py", "passes/__init__.py", "kernels/lower.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((PACKAGE / name).read_text())
    assert option_reads(tmp_path) == []
    (tmp_path / "kernels" / "stray.py").write_text(
        "import os\n\ndef fuse(options):\n    return options.opt_level >= 1 and os.environ.get('TENSORKILN_DEBUG')\n")
    found = option_reads(tmp_path)
    assert len(found) == 3 and all(f.startswith("kernels/stray.py") for f in found)


# ---- the stages ----------------------------------------------------------------------------------------
@needs_cc
def test_explain_shows_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))
    x, w = _args()
    for attempt in ("fresh build", "cache hit"):
        f = tk.compile(_model)
        text = f.explain(x, w)
        assert f.report(x, w).cache_hit == (attempt == "cache hit")
        for stage in STAGES:
            assert f"\n== {stage}: " in text, (attempt, stage)
        assert "after kernel grouping" in text and "k0_matmul" in text
        positions = [text.index(f"\n== {stage}: ") for stage in STAGES]
        assert positions == sorted(positions)


def test_explain_names_the_stages_not_run_by_the_interpreter():
    text = tk.jit(_model, backend="interpreter").explain(*_args())
    assert "== optimize: " in text and "reference interpreter" in text
    assert all(stage in text for stage in STAGES)


@needs_cc
def test_every_stage_is_dumped(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path / "cache"))
    dump = tmp_path / "dump"
    x, w = _args()
    for attempt in range(2):  # the second compile is a cache hit: its stages are dumped too
        for old in dump.glob("*"):
            old.unlink()
        tk.compile(_model, dump_dir=str(dump))(x, w)
        names = sorted(os.listdir(dump))
        assert names[0].endswith(".00.traced.txt")
        stages = [n.split(".")[-2] for n in names[-5:]]
        assert stages == ["group_kernels", "lower", "plan_memory", "generate_c", "build"]
        grouping = (dump / names[-5]).read_text()
        assert "k0_matmul" in grouping and "stores" in grouping
        assert "kernel " in (dump / names[-4]).read_text()
        assert "arena" in (dump / names[-3]).read_text()
        assert (dump / names[-2]).read_text().strip().endswith(".c")


def test_lowering_takes_the_grouping_as_input():
    x, w = _args()
    graph = tk.jit(_model).optimized_graph(x, w)
    fused, unfused = partition(graph), partition(graph, fuse=False)
    assert len(unfused) > len(fused)
    assert all(g.reason for g in fused + unfused)  # every materialized root says why
    assert len(lower_graph(graph, unfused).program.kernels) > len(lower_graph(graph, fused).program.kernels)


def test_graph_cache_imports_nothing_above_the_runtime():
    tree = ast.parse((PACKAGE / "runtime" / "graph_cache.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.lstrip(".").split(".")[0] in ("ir", "kernels", "passes", "driver")
                or m.startswith("tensorkiln.") and not m.startswith("tensorkiln.runtime")]
