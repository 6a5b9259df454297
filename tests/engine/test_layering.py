"""The package's import graph (read from the source with ast, nothing imported, so no bpy):
the layers point one way, panels -> operators -> properties -> engine (snow_addon) ->
kernels, and no module imports itself round a circle. Every import counts, the ones inside
functions too: a lazy import that closes a circle is still a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import snowfall

ROOT = Path(snowfall.__file__).parent
#: Folders of the repository that are not the package.
NOT_PACKAGE = {"tests", "tools", "docs", "out", "wheels", "__pycache__"}
#: What each layer (top-level folder) must never import. "" is the root package (the
#: add-on's register()) and blender_compat.py (bpy only), both above the engine.
FORBIDDEN = {
    "kernels": {"snow_addon", "operators", "panels", "properties", "farm", "benchmarks",
                "sample_scenes", "", "blender_compat"},
    "snow_addon": {"operators", "panels", "properties", "farm", "sample_scenes", "",
                   "blender_compat"},
    "properties": {"operators", "panels", "farm", "benchmarks", "sample_scenes"},
    "operators": {"panels", "benchmarks", "sample_scenes"},
}
#: The one import from the engine into a layer above it: ``snowfall benchmark`` runs the
#: harness (benchmarks/harness.py), which itself imports only the engine.
ALLOWED = {("snow_addon.cli", "benchmarks.harness")}
#: Modules the engine and the kernels never import (they run without Blender).
BLENDER_MODULES = {"bpy", "mathutils", "gpu", "gpu_extras", "bmesh"}


def _modules() -> dict:
    """Dotted name (relative to the package; "" for the root) -> source path."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0] in NOT_PACKAGE or any(p.startswith(".") or p == "__pycache__" or
                                          p.endswith(".egg-info") for p in parts):
            continue
        if len(parts) > 1 and not (ROOT / parts[0] / "__init__.py").is_file():
            continue
        names = list(parts[:-1]) + ([] if parts[-1] == "__init__.py" else [path.stem])
        modules[".".join(names)] = path
    return modules


def _imports(name: str, path: Path, modules: dict):
    """(imported module, line, absolute module name or None) for every import in ``path``:
    package modules by their dotted name, other modules (bpy, numpy) as ``None`` with their
    absolute name."""
    package = name.split(".") if name else []
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "snowfall" or alias.name.startswith("snowfall."):
                    target = alias.name[len("snowfall"):].lstrip(".")
                    yield (target if target in modules else None), node.lineno, alias.name
                else:
                    yield None, node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "snowfall" or node.module.startswith("snowfall."):
                target = node.module[len("snowfall"):].lstrip(".")
            else:
                yield None, node.lineno, node.module
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}".lstrip(".")
                if submodule in modules:
                    yield submodule, node.lineno, None
                elif target in modules:
                    yield target, node.lineno, None


def _graph() -> dict:
    modules = _modules()
    return {name: {(target, line) for target, line, _ in _imports(name, path, modules)
                   if target is not None and target != name}
            for name, path in modules.items()}


def _layer(name: str) -> str:
    return name.split(".")[0]


def _cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w, _line in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_layer_and_lazy_imports():
    graph = _graph()
    assert {"kernels.cpu.wind", "snow_addon.simulation", "snow_addon.formats.ptcache",
            "properties.groups", "operators.bake", "panels.main"} <= set(graph)
    # operators.estimates imports snow_addon.simulation inside a function
    assert "snow_addon.simulation" in {t for t, _line in graph["operators.estimates"]}


def test_cycle_finder_finds_a_circle_through_a_lazy_import():
    graph = {"a": {("b", 1)}, "b": {("c", 1)}, "c": {("a", 9)}, "d": {("a", 1)}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {("b", 1)}, "b": set()}) == []


def test_no_import_cycles():
    graph = _graph()
    cycles = _cycles(graph)
    described = [[f"{m} -> {t} (line {line})" for m in cycle for t, line in sorted(graph[m])
                  if t in cycle] for cycle in cycles]
    assert not cycles, described


def test_layers_point_one_way():
    wrong = []
    for name, targets in _graph().items():
        for target, line in targets:
            if _layer(target if target else "") in FORBIDDEN.get(_layer(name), ()) and \
                    (name, target) not in ALLOWED:
                wrong.append(f"{name} imports {target or 'the root package'} (line {line})")
    assert not wrong, wrong


def test_engine_and_kernels_never_import_blender():
    modules = _modules()
    wrong = [f"{name} imports {absolute} (line {line})"
             for name, path in modules.items() if _layer(name) in ("snow_addon", "kernels")
             for target, line, absolute in _imports(name, path, modules)
             if target is None and absolute.split(".")[0] in BLENDER_MODULES]
    assert not wrong, wrong
