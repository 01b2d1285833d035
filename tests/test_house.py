"""The house's size rules, held for every product module (portal/, scheduler/, fabrics/, gridlane_cli/): no module
over 700 lines, no class over 550, no function over 80, and no garbage-collector switch inside scheduler/ (its
caller owns that policy). Migrations are generated and left out."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("portal", "scheduler", "fabrics", "gridlane_cli")
MODULE_LINES, CLASS_LINES, FUNCTION_LINES = 700, 550, 80


def product_modules() -> list[Path]:
    found = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py")) if "migrations" not in p.parts]
    assert len(found) > 100  # the walk found the tree (a wrong root would pass every rule below)
    return found


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text()
    name = str(path.relative_to(root))
    found = [f"{name}: {text.count(chr(10))} lines"] if text.count("\n") > MODULE_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            limit = CLASS_LINES if isinstance(node, ast.ClassDef) else FUNCTION_LINES
            if lines > limit:
                found.append(f"{name}:{node.lineno}: {node.name} is {lines} lines (at most {limit})")
    return found


def test_no_module_class_or_function_is_over_its_size():
    assert [problem for path in product_modules() for problem in oversized(path)] == []


def test_the_size_check_sees_an_oversized_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    path = tmp_path / "probe.py"
    path.write_text(f"def long():\n{body}\n")
    assert oversized(path, tmp_path) == [f"probe.py:1: long is {FUNCTION_LINES + 1} lines (at most 80)"]


def test_the_scheduler_leaves_the_garbage_collector_to_its_caller():
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
        assert "gc" not in names, path
