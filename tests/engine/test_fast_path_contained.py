"""Only models/engine/_fast/ and setup.py know that the serving core is compiled.

The engine's sources are plain Python: no Cython import, directive or type file beside them, no
compiled module's name; the compiled twins (setup.py builds them into models/engine/_fast from the
sources manifest.py lists) import each other relatively, as the pure modules do, so both cores run the
same classes; and every compiled source has its C types in _fast/.
"""

from __future__ import annotations

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
