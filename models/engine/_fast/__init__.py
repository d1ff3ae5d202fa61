"""Which serving core runs: the compiled one (setup.py: Cython builds each source manifest.py lists as a
module of this package, `_fast.serving`, `_fast.kv`, ...) or the pure-Python modules themselves. Import
the engine's entry points, the classes it takes (its pool, prefix cache, latency laws and preemption
modes) and the fabric's fair shares from here.

The compiled modules live in this package, so they never shadow the .py files, and they carry the
digest of the sources they were built from. They are used only if it matches the sources beside this
file: a tree edited since the build runs its pure modules, with one warning, and results never depend
on whether a binary is stale. $WADILOCO_PURE=1 (or the CLI's and the benchmark's `--pure`, which set it)
picks the pure modules. `KIND` says which one runs and why. Both give bit-identical results
(tests/engine/test_performance.py).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from importlib import import_module
from pathlib import Path
from types import ModuleType

from wadiloco.models.engine._fast.listheap import ListHeap
from wadiloco.models.engine._fast.manifest import COMPILED, PACKAGE, module, sources

HERE = Path(__file__).resolve().parent
MODELS = HERE.parents[1]  # models/: the manifest's source paths are relative to it
SOURCES = sources()  # as setup.py digests them
PURE_ENV = "WADILOCO_PURE"
PURE = {module(src): "wadiloco.models." + src.replace("/", ".") for src in COMPILED}  # "kv": "...engine.kv"


def source_digest(folder: Path = MODELS) -> str:
    """setup.py's digest of the sources the compiled core is made of."""
    h = hashlib.sha256()
    for name in SOURCES:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def compiled_module(name: str = "serving") -> tuple[ModuleType | None, str]:
    """The compiled module `name` if it is built and current, else None; and why."""
    try:
        mod = import_module(f"{PACKAGE}.{name}")
    except ImportError:
        return None, "not built"
    if getattr(mod, "SOURCE_DIGEST", None) != source_digest():
        return None, f"stale (built from other sources than {MODELS / 'engine' / 'serving.py'} and its peers)"
    return mod, "current"


def select() -> str:
    """KIND: 'compiled', 'pure' (asked for) or 'pure: <why not compiled>'."""
    if pure_requested():
        return "pure"
    mod, why = compiled_module()
    if mod is not None:
        return "compiled"
    if why != "not built":
        warnings.warn(f"the compiled serving core is {why}: running the pure-Python one", stacklevel=2)
    return f"pure: compiled core {why}"


KIND = select()


def core(name: str) -> ModuleType:
    """The running core's module `name` (a base name in the manifest: "serving", "kv", ...): its compiled
    twin when the compiled core runs (built with it, from the same digest), else the pure module."""
    if KIND == "compiled":
        mod, _ = compiled_module(name)
        if mod is not None:  # (setup.py's extensions are optional: a failed one leaves the pure module)
            return mod
    return pure(name)


def pure(name: str) -> ModuleType:
    """The pure module `name`. The pure serving's finish heaps are heapq on a list (listheap.py): the
    same sifts as KeyHeap's, done in C where KeyHeap's array sifts would run as Python loops."""
    mod = import_module(PURE[name])
    if name == "serving":
        mod.KeyHeap = ListHeap
    return mod


serving = core("serving")
EngineState, serve, delay_to, NO_GATE = serving.EngineState, serving.serve, serving.delay_to, serving.NO_GATE
KVPool = serving.POOL  # the block pool class the running core takes (models.engine.kv)
PrefixCache = serving.CACHE  # and the prefix cache class (models.engine.prefix)
fabric_core = core("fairshare")  # links, jobs and every shared resource's re-allocation (sim.fabric)
fair_share = fabric_core.fair_share
