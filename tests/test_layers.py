"""The package's modules form layers (``autoplace.LAYERS``): no module imports a higher layer (at the top
or inside a function), and no import cycle exists between modules."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import autoplace

SRC = Path(autoplace.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= _imports_of(node, name, path, modules)
    return found - {name}


def _layer(name: str) -> int | None:
    """The layer of ``autoplace.X...`` (by ``X``); None for the package itself (it may import anything)."""
    if name == "autoplace":
        return None
    top = name.split(".")[1]
    for k, layer in enumerate(autoplace.LAYERS):
        if top in layer:
            return k
    raise AssertionError(f"{name} is in no layer of autoplace.LAYERS: add it")


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_module_is_in_a_layer_and_imports_none_above_it():
    bad = []
    for name, deps in _graph().items():
        mine = _layer(name)
        for dep in deps:
            theirs = _layer(dep)
            if mine is not None and theirs is not None and theirs > mine:
                bad.append(f"{name} (layer {mine}) imports {dep} (layer {theirs})")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles():
    graph = _graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:                      # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


#: what a function may import lazily: dependencies heavy to import (the optional ones, and numba, whose import
#: and compilation the simulator's C loop and ``import autoplace`` need not pay)
HEAVY = {"torch", "ortools", "google", "ray", "matplotlib", "sklearn", "onnx", "onnxscript", "safetensors",
         "accelerate", "numba"}


STDLIB = set(sys.stdlib_module_names)


def _function_imports():
    """Every import statement inside a function: ``(module, line, statement, project modules it loads,
    third-party packages it loads, whether it is inside a try)``."""
    modules = _modules()
    out = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        parents = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            p, tried, in_function = parents.get(node), False, False
            while p is not None:
                tried |= isinstance(p, ast.Try) and not in_function
                if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    in_function = True
                    break
                p = parents.get(p)
            if not in_function:
                continue
            project = _imports_of(node, name, path, modules)
            third = {a.name.split(".")[0] for a in node.names} if isinstance(node, ast.Import) else \
                ({(node.module or "").split(".")[0]} if not node.level else set())
            out.append((name, node.lineno, ast.unparse(node), project, third - {"autoplace"}, tried))
    return out


def _imports_of(node, name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules one import statement loads."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join(up + ([node.module] if node.module else []))
        candidates = [base, *(f"{base}.{a.name}" for a in node.names)]
    else:
        candidates = [a.name for a in node.names]
    return {c for c in candidates if c in modules}


def _heavy_at_import() -> set[str]:
    """The package's modules whose import (at their top, directly or through another module) loads a
    :data:`HEAVY` dependency."""
    modules = _modules()
    top: dict[str, set[str]] = {}
    heavy = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        deps = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= _imports_of(node, name, path, modules)
                roots = {a.name.split(".")[0] for a in node.names} if isinstance(node, ast.Import) else \
                    ({(node.module or "").split(".")[0]} if not node.level else set())
                if roots & HEAVY:
                    heavy.add(name)
        top[name] = deps
    grown = True
    while grown:
        grown = False
        for name, deps in top.items():
            if name not in heavy and deps & heavy:
                heavy.add(name)
                grown = True
    return heavy


def test_imports_are_at_the_top_but_for_heavy_dependencies():
    """A function imports lazily only what is heavy to import (:data:`HEAVY`, or a module of the package that
    loads one at its top), or, inside a ``try``, a third-party package (an optional dependency that may be
    missing) — never the standard library or a light module of the package."""
    heavy = _heavy_at_import()
    optional = lambda third, project: bool(third) and not (third & STDLIB) and not project  # noqa: E731
    light = [f"{name}:{line} {text}" for name, line, text, project, third, tried in _function_imports()
             if not (tried and optional(third, project)) and not (third & HEAVY) and not (project & heavy)]
    assert not light, light


def test_few_imports_of_the_package_are_inside_functions():
    """At most one in ten of the package's imports of its own modules is inside a function."""
    modules = _modules()
    total = sum(1 for name, path in modules.items() for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_of(node, name, path, modules))
    inside = sum(1 for *_, project, _third, _tried in _function_imports() if project)
    assert inside <= 0.10 * total, (inside, total)


def test_no_package_imports_another_s_private_names():
    """A name with a leading underscore (a module or what it defines) is its package's own: no other package
    of autoplace imports it."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        package = name.split(".")[1] if name.count(".") else ""
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("autoplace."):
                continue
            parts = node.module.split(".")
            if parts[1] == package:
                continue
            private = [p for p in parts[1:] if p.startswith("_")] + \
                [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private:
                bad.append(f"{name}: from {node.module} import {', '.join(a.name for a in node.names)}")
    assert not bad, bad


#: functions that may run past a page: the numba kernel's event loop, kept line for line with the C loop
LONG_FUNCTIONS = {"autoplace.sim._kernel.simulate_one"}


def test_no_function_is_longer_than_a_page():
    """At most 100 lines a function (its docstring included), but :data:`LONG_FUNCTIONS`."""
    long = [f"{name}.{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, path in _modules().items() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 100
            and f"{name}.{node.name}" not in LONG_FUNCTIONS]
    assert not long, long
