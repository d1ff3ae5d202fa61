"""The package import graph is a DAG: no module of wadiloco.* imports itself back, however far round.

Edges come from the source (AST), so imports inside functions count too: a lazy import that closes
a circle only hides it. `import a.b.c` and `from a.b import c` are edges to the project module they
name (`a.b.c` if that is a module, else the nearest package); the implicit import of a parent
package's `__init__` is not an edge, or every package that imports its own submodules would count.
The leaf modules that must import nothing of the project but errors are checked by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = ("sim", "models", "experiments", "benchmarks")


def _modules() -> dict[str, Path]:
    out = {}
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out["wadiloco." + ".".join(parts)] = path
    return out


MODULES = _modules()


def _nearest(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path) -> set[str]:
    """The project modules `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(_nearest(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.add(full if full in MODULES else _nearest(base))
    found.discard(None)
    found.discard(name)
    return found  # type: ignore[return-value]


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path a -> ... -> a, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_the_walk_sees_the_project():
    assert len(MODULES) > 60
    # the walk finds top-level, lazy (in-function) and relative-to-package imports
    assert "wadiloco.models.spec.schema" in GRAPH["wadiloco.models.spec.load"]
    assert "wadiloco.experiments.runner" in GRAPH["wadiloco.experiments.commands"]  # inside cmd_run
    assert "wadiloco.models.policies.fixed" in GRAPH["wadiloco.models.policies"]


def test_no_import_cycles():
    cycle = _cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_can_fire():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    # a lazy import that closes a circle is one
    g = {k: set(v) for k, v in GRAPH.items()}
    g["wadiloco.models.spec.schema"].add("wadiloco.models.spec.load")
    assert _cycle(g) is not None


@pytest.mark.parametrize(
    "leaf",
    [
        "wadiloco.models.spec.schema",
        "wadiloco.models.errors",
        "wadiloco.models.workload.traces",
        "wadiloco.models.spec.files",
    ],
)
def test_leaf_modules_import_only_errors(leaf):
    # models.spec.files (bounded reads of regular files) is itself a leaf over models.errors
    assert GRAPH[leaf] <= {"wadiloco.models.errors", "wadiloco.models.spec.files"}, GRAPH[leaf]


# ---- a scenario is resolved once: past models.spec, nothing sees a `Scenario` ---------------------------
# The simulation (sim/) and every model outside models/spec receive typed sub-specs (models.spec.run
# RunSpec); only the code that reads and edits scenario files names the class: models/spec itself, the
# command line (the commands, --set overrides, provenance, capacity searches, sweep planning, the
# reference pages generated from the schema), the benchmarks (scripts that load and edit scenarios as
# the command line does) and the tests.
SCENARIO_READERS = (
    "models/spec/",
    "experiments/cli.py",
    "experiments/commands.py",
    "experiments/overrides.py",
    "experiments/planning_cli.py",
    "experiments/provenance.py",
    "experiments/capacity.py",
    "experiments/sweep/plan.py",
    "experiments/reference.py",
    "benchmarks/",
)


def scenario_users(paths) -> list[str]:
    """Where a source file names `Scenario`: imports it, or reads it off a module (`spec.Scenario`)."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = isinstance(node, ast.ImportFrom) and any(a.name == "Scenario" for a in node.names)
            if named or (isinstance(node, ast.Attribute) and node.attr == "Scenario"):
                out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.lineno}")
    return out


def test_no_scenario_past_resolution():
    core = [p for p in MODULES.values() if not str(p.relative_to(ROOT)).startswith(SCENARIO_READERS)]
    assert any("sim/" in str(p) for p in core) and any("models/engine/" in str(p) for p in core)
    assert not scenario_users(core), "resolve it (models.spec.resolve) and pass a sub-spec instead"


def test_the_scenario_check_fires(tmp_path):
    (tmp_path / "a.py").write_text("from wadiloco.models.spec.scenario import MERGE_PHASES, Scenario\n")
    (tmp_path / "b.py").write_text("import wadiloco.models.spec.load as L\nx: L.Scenario\n")
    (tmp_path / "c.py").write_text("from wadiloco.models.spec.run import RunSpec\n")
    assert scenario_users([tmp_path / n for n in ("a.py", "b.py", "c.py")]) == ["a.py:1", "b.py:2"]


# ---- the testbed twin is a plug-in: the core never imports it -------------------------------------------
# The core is every module of models/ and sim/ but the twin itself (models/testbed); the twin is its
# package and the studies that tabulate it (experiments/studies/testbed_*). The core's registries load
# the twin at run time (models.plugins), by a name no import statement holds.


def _is_plugin(name: str) -> bool:
    return (
        name == "wadiloco.models.testbed"
        or name.startswith("wadiloco.models.testbed.")
        or name.startswith("wadiloco.experiments.studies.testbed_")
    )


def _is_core(name: str) -> bool:
    return name.startswith(("wadiloco.models", "wadiloco.sim")) and not _is_plugin(name)


def plugin_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every core module that reaches the twin through imports, direct or through other modules, with
    the path (a -> ... -> the twin's module)."""
    out = []
    for root in sorted(n for n in graph if _is_core(n)):
        seen, stack = {root}, [[root]]
        while stack:
            path = stack.pop()
            for nxt in sorted(graph.get(path[-1], ())):
                if _is_plugin(nxt):
                    out.append(" -> ".join(path + [nxt]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append(path + [nxt])
    return out


def test_the_core_never_imports_the_testbed():
    core = [n for n in GRAPH if _is_core(n)]
    assert any(n.startswith("wadiloco.sim.") for n in core) and "wadiloco.models.spec.resolve" in core
    assert "wadiloco.models.testbed.plugin" in GRAPH and not _is_core("wadiloco.models.testbed.plugin")
    bad = plugin_imports(GRAPH)
    assert not bad, "register through a core registry (models.plugins) instead: " + "; ".join(bad[:5])


def test_the_testbed_import_check_fires():
    g = {k: set(v) for k, v in GRAPH.items()}
    g["wadiloco.models.workload.prompt_sets"].add("wadiloco.models.testbed.prompts")  # a direct import
    g["wadiloco.models.spec.files"].add("wadiloco.experiments.studies.testbed_table")  # a study
    found = plugin_imports(g)
    assert "wadiloco.models.workload.prompt_sets -> wadiloco.models.testbed.prompts" in found
    assert "wadiloco.sim.fleet" in " ".join(found)  # and whatever reaches them, however far round
    assert any(p.endswith("wadiloco.models.spec.files -> wadiloco.experiments.studies.testbed_table") for p in found)
