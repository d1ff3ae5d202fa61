"""Only models/engine/_fast/ and setup.py know that the serving core is compiled.

The engine's sources are plain Python: no Cython import, directive or type file beside them, no
compiled module's name; the compiled twins (setup.py builds them into models/engine/_fast from the
sources manifest.py lists) import each other relatively, as the pure modules do, so both cores run the
same classes; and every compiled source has its C types in _fast/. No code bends to the compiler: no
`x != x` for a NaN test (math.isnan says it), and nothing reaches into a compiled class's private
fields or methods (its typed views and counters) from outside the class.
"""

from __future__ import annotations

import ast
import re
from importlib import import_module
from pathlib import Path

import numpy as np
import pytest

from wadiloco.models.engine import _fast
from wadiloco.models.engine._fast.manifest import COMPILED, PACKAGE, module
from wadiloco.models.engine.latency import default_latency

ROOT = Path(__file__).resolve().parents[2]
FAST = ROOT / "models" / "engine" / "_fast"
CODE = [ROOT / d for d in ("models", "sim", "experiments", "benchmarks")]
CYTHON = re.compile(r"^\s*(import cython|from cython|cimport |from \S+ cimport)|^#\s*cython:", re.M)
TWINS = "|".join(module(s) for s in COMPILED)
TWIN = re.compile(rf"_fast\.({TWINS})\b|\b_\w+_c\b")
PEERS = "|".join(s.replace("/", r"\.") for s in COMPILED)


def outside_fast(pattern: str):
    for folder in CODE:
        for p in folder.rglob(pattern):
            if FAST not in p.parents:
                yield p


def test_no_cython_outside_fast():
    found = [str(p.relative_to(ROOT)) for p in outside_fast("*.py") if CYTHON.search(p.read_text())]
    assert not found, f"Cython imports or directives outside models/engine/_fast: {found}"
    typed = [str(p.relative_to(ROOT)) for ext in ("*.pxd", "*.pyx", "*.pxi") for p in outside_fast(ext)]
    assert not typed, f"Cython files outside models/engine/_fast: {typed}"


def test_no_compiled_module_is_named_outside_fast():
    found = [str(p.relative_to(ROOT)) for p in outside_fast("*.py") if TWIN.search(p.read_text())]
    assert not found, f"names of compiled modules outside models/engine/_fast and setup.py: {found}"


@pytest.mark.parametrize("src", COMPILED)
def test_compiled_sources_import_only_compiled_peers_relatively(src):
    text = (ROOT / "models" / f"{src}.py").read_text()
    names = {module(s) for s in COMPILED}
    assert set(re.findall(r"^\s*from \.(\w*) import", text, re.M)) <= names
    assert not re.search(rf"^\s*from wadiloco\.models\.({PEERS}) import", text, re.M), (
        "import the compiled peers relatively (their twins are another package)"
    )
    assert (FAST / f"{module(src)}.pxd").is_file()


def test_both_cores_run_the_same_classes():
    """An engine of either core holds queues, a heap, a pool of the one class of each role (the compiled
    core: its compiled twin, from the same source)."""
    kinds = [import_module(_fast.PURE["serving"])]
    compiled, _ = _fast.compiled_module("serving")
    if compiled is not None:
        kinds.append(compiled)
    for mod in kinds:
        pool = mod.POOL(100, 16)
        st = mod.EngineState(
            np.zeros(1), [5], [3], default_latency(), max_num_seqs=2, max_num_batched_tokens=8, host_s=0.0, kv=pool
        )
        held = {"waiting": st.waiting, "prefilling": st.prefilling, "fin_heap": st.fin_heap, "kv": st.kv}
        names = {k: (type(v).__name__, type(v).__module__.rsplit(".", 1)[-1]) for k, v in held.items()}
        assert names == {
            "waiting": ("RingFifo", "fifo"),
            "prefilling": ("RingFifo", "fifo"),
            "fin_heap": ("KeyHeap", "heap"),
            "kv": ("KVPool", "kv"),
        }
        package = type(st).__module__.rsplit(".", 1)[0]
        assert {type(v).__module__.rsplit(".", 1)[0] for v in held.values()} == {package}
        assert package in (PACKAGE, "wadiloco.models.engine")


def private_names() -> set[str]:
    """The private fields and methods the compiled classes declare (`cdef ... _name` in the .pxd files)."""
    names = set()
    for pxd in FAST.glob("*.pxd"):
        for line in pxd.read_text().splitlines():
            if re.match(r"\s+c?p?def ", line) and not line.lstrip().startswith("cdef class"):
                names |= set(re.findall(r"\b(_[A-Za-z]\w*)\b", line.split("(self")[0]))
    return names


def reaches(tree: ast.AST, names: set[str]):
    """obj._name for a private name of `names` on anything but self."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                yield node


def self_compared(tree: ast.AST):
    """x != x and x == x (a NaN test by the compiler's idiom)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            if ast.dump(node.left) == ast.dump(node.comparators[0]):
                yield node


def test_no_code_bends_to_the_compiler():
    names = private_names()
    assert {"_t_arr", "_cnt", "_a", "_head_nb"} <= names  # (the parse finds the typed views)
    found = []
    for p in outside_fast("*.py"):
        tree = ast.parse(p.read_text())
        found += [f"{p.relative_to(ROOT)}:{n.lineno} {ast.unparse(n)}" for n in reaches(tree, names)]
        found += [f"{p.relative_to(ROOT)}:{n.lineno} {ast.unparse(n)}" for n in self_compared(tree)]
    assert not found, f"compiler-driven code outside models/engine/_fast: {found}"


def test_the_checks_fire():
    tree = ast.parse("def f(st, x):\n    y = st._t_arr[0]\n    return x != x or self._cnt\n")
    assert [ast.unparse(n) for n in reaches(tree, {"_t_arr", "_cnt"})] == ["st._t_arr"]
    assert [ast.unparse(n) for n in self_compared(tree)] == ["x != x"]


def shadows(tree: ast.AST):
    """(class, name) of every `self._x = self.x` (a typed view kept beside the array it views)."""
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                pairs = zip(*(e.elts if isinstance(e, ast.Tuple) else [e] for e in (node.targets[0], node.value)))
                for t, v in pairs:
                    if isinstance(t, ast.Attribute) and isinstance(v, ast.Attribute) and t.attr == "_" + v.attr:
                        yield cls.name, v.attr


def test_only_the_engine_state_keeps_views_beside_its_arrays():
    """The engine's per-request arrays are read outside it as what they are (numpy results; arrivals and
    token counts as array('d'/'q'), appended to by a router or a client, compared byte for byte by a
    tape), which a typed view is not: EngineState keeps both, its views private. Every other compiled
    class holds its typed arrays only (a copy for checks and tests: `KVPool.cnt`, `shared`)."""
    found = set()
    for src in COMPILED:
        found |= {cls for cls, _ in shadows(ast.parse((ROOT / "models" / f"{src}.py").read_text()))}
    assert found == {"EngineState"}
    tree = ast.parse("class A:\n    def f(self):\n        self._a, self.b = self.a, 1\n")
    assert list(shadows(tree)) == [("A", "a")]
