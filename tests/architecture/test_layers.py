"""The package's import structure: layers import only downward, and no two files import each other.

Every import counts, at module level or inside a function: an import hidden in a
function to dodge a cycle is still a cycle. The layer table below is the map of
docs/architecture.md; a module's layer is that of its longest listed prefix.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tensorkiln"

# Bottom to top: a module may import its own layer and the layers below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("tensorkiln.errors", "tensorkiln.dtypes")),
    ("runtime", ("tensorkiln.runtime",)),
    ("loop IR", ("tensorkiln.loops", "tensorkiln.shapes")),
    ("codegen", ("tensorkiln.codegen",)),
    ("graph IR", ("tensorkiln.ir",)),
    ("kernels", ("tensorkiln.kernels",)),
    ("graph passes", ("tensorkiln.passes",)),
    ("driver", ("tensorkiln.driver",)),
    ("image pipelines", ("tensorkiln.pipeline",)),
    ("front-end", ("tensorkiln.frontend", "tensorkiln.nn", "tensorkiln.optim", "tensorkiln.distributed",
                   "tensorkiln.quantization")),
    ("importers", ("tensorkiln.importers", "tensorkiln.onnx")),
    ("tuning", ("tensorkiln.tune",)),
    ("applications", ("tensorkiln.models", "tensorkiln.hw", "tensorkiln.md", "tensorkiln.tools", "tensorkiln")),
]


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its __init__.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports (relative imports resolved, names that are modules kept)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= statement_targets(node, name, path, known)
    return found


def statement_targets(node: ast.Import | ast.ImportFrom, name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules one import statement in module `name` names."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
            if node.level else node.module or ""
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def layer_of(name: str) -> int:
    """Index into LAYERS of the module's layer (longest matching prefix)."""
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def test_every_module_has_a_layer():
    unplaced = [name for name in modules() if layer_of(name) < 0]
    assert not unplaced, f"modules outside every layer of LAYERS: {unplaced}"


def test_no_import_points_upward():
    upward = []
    for name, targets in import_graph().items():
        for target in sorted(targets):
            if target != "tensorkiln" and layer_of(target) > layer_of(name):
                upward.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} "
                              f"({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_package_root_holds_only_the_public_surface():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert root == ["__init__.py", "dtypes.py", "errors.py", "onnx.py"], root


# Modules that import torch when they load: importing them inside a function keeps torch optional.
NEEDS_TORCH = ("tensorkiln.importers.torch", "tensorkiln.tools.torch_reference")


def test_imports_inside_functions_are_for_optional_packages_only():
    """An import inside a function dodges nothing: it names an optional package (torch, onnx ...), a module
    that needs one, or a subcommand the CLI loads when it runs."""
    known = modules()
    hidden = []
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                for target in statement_targets(node, name, path, known):
                    if name == "tensorkiln.tools.cli" or target.startswith(NEEDS_TORCH):
                        continue
                    hidden.append(f"{name}:{node.lineno} imports {target} inside {function.name}()")
    assert not hidden, "imports inside functions (move them to the top of the module):\n" + "\n".join(hidden)
