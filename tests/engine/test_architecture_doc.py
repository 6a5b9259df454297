"""docs/architecture.md names only what exists: every file path it lists in backticks
(``snow_addon/worker.py``, ``kernels/gpu/pressure.cu``), every dotted name it lists
(``snow_addon.fences.PorousFence``, ``bake_cache.BakeWriter``, ``Simulation.wind_field``),
the names in its module tables and the methods of its class and API listings.

Everything is read with ast from the source (nothing is imported, so the add-on's bpy
modules are checked the same way, without Blender).
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import snowfall

ROOT = Path(snowfall.__file__).parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("snow_addon", "kernels", "operators", "panels", "properties", "farm", "benchmarks",
            "sample_scenes", "presets")
NOT_PACKAGE = {"tests", "tools", "docs", "out", "wheels"}


@lru_cache(maxsize=None)
def _modules() -> dict:
    """Dotted module name -> path, for every module of the package."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] in NOT_PACKAGE or any(p.startswith(".") or p == "__pycache__"
                                          for p in parts):
            continue
        names = list(parts[:-1]) + ([] if parts[-1] == "__init__.py" else [path.stem])
        found[".".join(names)] = path
    return found


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _defined(body) -> dict:
    """Names a module or class body defines -> their node (None for plain names)."""
    names = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for element in ast.walk(target):
                    if isinstance(element, ast.Name):
                        names[element.id] = None
                if isinstance(target, ast.Name) and target.id == "__all__" and \
                        isinstance(node.value, (ast.List, ast.Tuple)):
                    # a package's lazily imported names (module __getattr__)
                    names.update({e.value: None for e in node.value.elts
                                  if isinstance(e, ast.Constant)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
        elif isinstance(node, (ast.If, ast.Try)):
            names.update(_defined(node.body))
            for handler in getattr(node, "handlers", ()):
                names.update(_defined(handler.body))
            names.update(_defined(node.orelse))
    return names


def _class_has(node: ast.ClassDef, name: str) -> bool:
    """The class defines ``name`` (method, class attribute, dataclass field) or a method
    assigns ``self.name``; base classes of the package are searched too."""
    if name in _defined(node.body):
        return True
    for item in ast.walk(node):
        if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store) and \
                isinstance(item.value, ast.Name) and item.value.id == "self" and \
                item.attr == name:
            return True
    for base in node.bases:
        if isinstance(base, ast.Name):
            for other in _classes(base.id):
                if _class_has(other, name):
                    return True
    return False


@lru_cache(maxsize=None)
def _all_classes() -> dict:
    """Class name -> its definitions, in the add-on and the engine (the benchmark scripts'
    own classes are not what the page means)."""
    classes = {}
    for module, path in _modules().items():
        if module.split(".")[0] in ("benchmarks", "sample_scenes"):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(node)
    return classes


def _classes(name: str) -> list:
    return _all_classes().get(name, [])


def _module_has(module: str, names: list) -> bool:
    """``module`` (dotted) defines ``names[0]``, and each further name is an attribute of the
    class before it (or a submodule)."""
    modules = _modules()
    if not names:
        return module in modules
    if f"{module}.{names[0]}".strip(".") in modules:
        return _module_has(f"{module}.{names[0]}".strip("."), names[1:])
    if module not in modules:
        return False
    defined = _defined(_tree(modules[module]).body)
    if names[0] not in defined:
        return False
    node = defined[names[0]]
    if len(names) == 1:
        return True
    if isinstance(node, ast.ClassDef):
        return _class_has(node, names[1])
    # re-exported: look the name up where it is defined
    return any(_class_has(cls, names[1]) for cls in _classes(names[0]))


def _resolve_dotted(text: str, section_folder: str | None) -> bool | None:
    """True/False for a dotted name the page can mean, None for one it cannot (bpy.…)."""
    parts = text.split(".")
    stems = {}
    for module in _modules():
        stems.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    if parts[0] == "snowfall":
        parts = parts[1:]
    if parts[0] in PACKAGES or parts[0] == "blender_compat":
        if "*" in parts:
            star = parts.index("*")
            base = ".".join(parts[:star])
            choices = [m.split(".")[star] for m in _modules()
                       if m.startswith(base + ".") and len(m.split(".")) > star + 1]
            candidates = {".".join(parts[:star] + [c] + parts[star + 1:]) for c in choices}
            return any(_resolve_dotted(c, section_folder) for c in candidates
                       if c.split(".")[:star + 2] and ".".join(c.split(".")[:star + 2])
                       in _modules())
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if module in _modules():
                return _module_has(module, parts[cut:])
        return False
    if section_folder and f"{section_folder}.{parts[0]}" in _modules():
        return _module_has(f"{section_folder}.{parts[0]}", parts[1:])
    if len(stems.get(parts[0], [])) == 1:
        return _module_has(stems[parts[0]][0], parts[1:])
    if _classes(parts[0]) and len(parts) == 2:
        return any(_class_has(cls, parts[1]) for cls in _classes(parts[0]))
    return None


PATH = re.compile(r"^(?P<path>[\w./*-]+\.(?:py|cu|md|toml|json|js|yaml|sh))"
                  r"(?::\s*(?P<name>\w+))?$")
MODULE_PATH_NAME = re.compile(r"^(?P<path>[\w/]+/\w+)\.(?P<names>[A-Za-z_][\w.]*)$")
FOLDER = re.compile(r"^(?P<path>[\w/]+)/$")
DOTTED = re.compile(r"^[A-Za-z_][\w]*(?:\.(?:[A-Za-z_]\w*|\*))+$")
IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


def _span_checks(text: str, section_folder: str | None):
    """(what, ok) for one backticked span; nothing for spans that name no code."""
    text = text.strip()
    call = re.match(r"^(.*?)\(.*\)$", text)
    bare = call.group(1) if call else text
    match = PATH.match(text)
    if match:
        path = match.group("path")
        if path.startswith("../"):
            return
        candidates = [ROOT / path] + ([ROOT / section_folder.replace(".", "/") / path]
                                      if section_folder else [])
        where = next((c for c in candidates if c.exists()), None)
        yield text, where is not None
        if where is not None and match.group("name"):
            module = ".".join(where.relative_to(ROOT).with_suffix("").parts)
            yield text, _module_has(module, [match.group("name")])
        return
    match = FOLDER.match(text)
    if match:
        yield text, (ROOT / match.group("path")).is_dir()
        return
    match = MODULE_PATH_NAME.match(bare)
    if match and (ROOT / (match.group("path") + ".py")).exists():
        module = match.group("path").replace("/", ".")
        yield text, _module_has(module, match.group("names").split("."))
        return
    if DOTTED.match(bare):
        ok = _resolve_dotted(bare, section_folder)
        if ok is not None:
            yield text, ok


def _checks():
    """(what, ok) for everything the page names."""
    section_folder = None
    in_code = False
    class_name = None
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            in_code, class_name = not in_code, None
            continue
        if in_code:
            # class listings: their methods and attributes; the API listing: sim.<name>
            match = re.match(r"^class (\w+)\b", line)
            if match:
                class_name = match.group(1)
                yield f"class {class_name}", bool(_classes(class_name))
                continue
            match = re.match(r"^\s+def (\w+)\(", line)
            if match and class_name:
                yield f"{class_name}.{match.group(1)}", any(
                    _class_has(c, match.group(1)) for c in _classes(class_name))
            for name in re.findall(r"(?<![\w.])sim\.(\w+)", line):
                yield f"Simulation.{name}", any(_class_has(c, name)
                                                for c in _classes("Simulation"))
            match = re.match(r"^from snowfall\.([\w.]+) import (.+)$", line)
            if match:
                for name in re.split(r",\s*", match.group(2)):
                    yield line, _module_has(match.group(1), [name.strip()])
            continue
        heading = re.match(r"^#+ .*\((\w+)/", line)     # "## Engine classes (snow_addon/)"
        if line.startswith("#"):
            section_folder = heading.group(1) if heading else None
        spans = re.findall(r"`([^`]+)`", line)
        cells = [c.strip() for c in line.strip().strip("|").split("|")] \
            if line.startswith("|") else []
        if len(cells) >= 2 and re.fullmatch(r"`[\w/]+\.py`", cells[0]):
            # a module table row: the names in its second cell are the module's
            path = cells[0].strip("`")
            folder = section_folder.replace(".", "/") + "/" if section_folder else ""
            module = (folder + path if (ROOT / (folder + path)).exists() else path)
            module = module[:-3].replace("/", ".")
            for name in re.findall(r"`([^`]+)`", cells[1]):
                name = re.sub(r"\(.*\)$", "", name.strip())
                if IDENTIFIER.match(name):
                    yield f"{module}.{name}", _module_has(module, [name]) or any(
                        _class_has(c, name) for c in _all_classes_in(module))
                elif DOTTED.match(name):
                    yield f"{module}: {name}", bool(_resolve_dotted(name, section_folder))
            spans = [s for cell in [cells[0]] + cells[2:] for s in re.findall(r"`([^`]+)`", cell)]
        for span in spans:
            yield from _span_checks(span, section_folder)


def _all_classes_in(module: str) -> list:
    path = _modules().get(module)
    if path is None:
        return []
    return [n for n in ast.walk(_tree(path)) if isinstance(n, ast.ClassDef)]


def test_architecture_doc_names_only_what_exists():
    checks = list(_checks())
    missing = sorted({what for what, ok in checks if not ok})
    assert not missing, f"docs/architecture.md names what the code lacks: {missing}"
    # the page lists a great deal; a parser that stopped seeing it would check nothing
    assert len(checks) > 150, len(checks)


def test_the_checker_catches_a_wrong_name():
    assert list(_span_checks("snow_addon/worker.py", None)) == [("snow_addon/worker.py", True)]
    assert list(_span_checks("snow_addon/no_such_module.py", None))[0][1] is False
    assert _resolve_dotted("snow_addon.fences.PorousFence", None) is True
    assert _resolve_dotted("snow_addon.fences.NoSuchFence", None) is False
    assert _resolve_dotted("bake_cache.BakeWriter", None) is True
    assert _resolve_dotted("Simulation.no_such_method", None) is False
    assert _resolve_dotted("bpy.app.version", None) is None
