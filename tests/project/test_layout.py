"""The install layout: the design card's folders are subpackages of one namespace, `wadiloco`.

- every package folder is listed in setup.cfg (otherwise a plain `pip install .` silently drops it);
- no module imports a bare top-level `sim`, `models`, `experiments` or `benchmarks`, which would
  pick up whatever folder of that name sits on the user's path.
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("sim", "models", "experiments", "benchmarks")


def _source_files():
    for top in TOP:
        yield from sorted((ROOT / top).rglob("*.py"))
    yield from sorted((ROOT / "tests").rglob("*.py"))


def test_every_package_folder_is_installed():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = {p.strip() for p in cfg["options"]["packages"].split() if p.strip()}
    found = {
        "wadiloco." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in (*TOP, "scenarios")  # scenarios: data the sweep files and benchmarks read, installed too
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == listed, (
        f"setup.cfg packages differ from the folders: missing {found - listed}, extra {listed - found}"
    )


def test_no_bare_top_level_imports():
    bad = []
    for path in _source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in TOP]
    assert not bad, "import through the wadiloco namespace: " + ", ".join(bad)


MAX_FUNCTION_LINES = 60


def long_functions(paths) -> list[str]:
    """Functions (and methods, nested ones included) longer than MAX_FUNCTION_LINES lines,
    decorators and docstring included."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                n = node.end_lineno - first + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{path.name}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_60_lines():
    """In the project's code (the test suite's own functions aside)."""
    paths = [p for top in ("models", "sim", "experiments", "benchmarks") for p in sorted((ROOT / top).rglob("*.py"))]
    assert len(paths) > 50
    long = long_functions(paths)
    assert not long, "split these: " + "; ".join(long)


def test_the_length_check_fires(tmp_path):
    body = "    x = 1\n"
    (tmp_path / "ok.py").write_text("@staticmethod\ndef f():\n" + body * (MAX_FUNCTION_LINES - 2))
    (tmp_path / "long.py").write_text("class C:\n    def g(self):\n" + ("    " + body) * MAX_FUNCTION_LINES)
    assert long_functions([tmp_path / "ok.py"]) == []
    assert long_functions([tmp_path / "long.py"]) == [f"long.py:2 g ({MAX_FUNCTION_LINES + 1} lines)"]
