"""The library's layout (docs/architecture.md, "Library map"): packages by stage, a few shared
modules at the top, and imports that run one way — no circle between the packages and modules of
headwatch/, and none from a lower room of the map to a higher one."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "headwatch"


def _unit(module: str) -> str | None:
    """The room of a headwatch module: its package under headwatch/, or the top module itself."""
    parts = module.split(".")
    if parts[0] != "headwatch" or len(parts) == 1:
        return None
    return parts[1]


def _imports() -> dict[str, set[str]]:
    """Room -> the rooms its modules import (every import, inside functions too)."""
    graph: dict[str, set[str]] = {}
    for path in LIB.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        src = _unit(module) if module != "headwatch" else None
        if src is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names] if base == "headwatch" else [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                unit = _unit(t)
                if unit and unit != src and ((LIB / unit).is_dir() or (LIB / f"{unit}.py").exists()):
                    graph.setdefault(src, set()).add(unit)
    return graph


def _map_rows() -> dict[str, int]:
    """Each room's row in docs/architecture.md's library map, 0 = the top (rooms of one row share it)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Library map", 1)[1].split("\n\n| package or module |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for i, line in enumerate(table.splitlines()[2:]):
        for name in re.findall(r"`([a-z_]+)(?:/|\.py)`", line.split("|")[1]):
            rows[name] = i
    return rows


def test_at_most_eight_modules_at_the_top():
    top = sorted(p.name for p in LIB.glob("*.py"))
    assert len(top) <= 8, top


def test_no_circle_between_the_rooms():
    graph = _imports()
    seen, stack, cycles = set(), [], []

    def visit(n):
        if n in stack:
            cycles.append(stack[stack.index(n):] + [n])
            return
        if n in seen:
            return
        seen.add(n)
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            visit(m)
        stack.pop()

    for n in sorted(graph):
        visit(n)
    assert cycles == []


def test_imports_run_down_the_library_map():
    """Every room of headwatch/ is in the map, and each imports only rooms of its row or below it
    (one row's rooms import each other without a circle: the test above)."""
    row = _map_rows()
    rooms = ({p.name for p in LIB.iterdir() if (p / "__init__.py").exists()}
             | {p.stem for p in LIB.glob("*.py")}) - {"__init__"}
    assert sorted(row) == sorted(rooms), "docs/architecture.md's library map names every package and module"
    upward = sorted(f"{a} -> {b}" for a, bs in _imports().items() for b in bs if row[b] < row[a])
    assert upward == []


def test_the_warm_starts_live_with_the_tests():
    assert not (LIB / "warmstart.py").exists() and not (LIB / "warmstart_site").exists()
    assert (ROOT / "tests" / "warmstart.py").exists()


def test_one_layer_registers_hooks():
    """Every hook headwatch puts on a model is registered by headwatch/model/interventions.py: device,
    dtype and removal are handled there once (the edge graph's rewiring included)."""
    hooks = re.compile(r"\.register_(forward|forward_pre|full_backward|full_backward_pre)_hook\(|\.register_hook\(")
    where = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "headwatch").rglob("*.py") if hooks.search(p.read_text()))
    assert where == ["headwatch/model/interventions.py"]


def test_no_function_is_over_80_lines_or_takes_over_10_arguments():
    """A function a maintainer can read on one screen, called with what it needs (self and cls not counted):
    docs/architecture.md, "The rooms every change passes through"."""
    long, wide = [], []
    for path in sorted(LIB.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
            lines = node.end_lineno - node.lineno + 1
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs] + [x for x in (a.vararg, a.kwarg) if x is not None]
            if a.args and a.args[0].arg in ("self", "cls"):
                params = params[1:]
            if lines > 80:
                long.append(f"{where}: {lines} lines")
            if len(params) > 10:
                wide.append(f"{where}: {len(params)} arguments")
    assert not long and not wide, long + wide
