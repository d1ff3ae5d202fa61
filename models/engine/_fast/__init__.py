"""Which serving core runs: the compiled one (setup.py: Cython from models/engine/serving.py, batching.py,
heap.py, kv.py, prefix.py and fairshare.py) or the pure-Python modules themselves. Import the engine's
entry points, and the fabric's fair shares, from here.

The compiled modules have names of their own (`_serving_c`, `_batching_c`, `_heap_c`, `_kv_c`,
`_prefix_c`, `_fairshare_c`), so they never shadow the .py files, and they carry the digest of the sources they were
built from. They are used only if it matches the sources beside this file: a tree edited since the
build runs its pure modules, with one warning, and results never depend on whether a binary is stale.
$WADILOCO_PURE=1 (or the CLI's and the benchmark's `--pure`, which set it) picks the pure modules.
`KIND` says which one runs and why. Both give bit-identical results (tests/test_performance.py).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from importlib import import_module
from pathlib import Path
from types import ModuleType

from wadiloco.models.engine._fast.manifest import COMPILED, PACKAGE, sources

HERE = Path(__file__).resolve().parent
MODELS = HERE.parents[1]  # models/: the manifest's source paths are relative to it
SOURCES = sources()  # as setup.py digests them
PURE_ENV = "WADILOCO_PURE"


def source_digest(folder: Path = MODELS) -> str:
    """setup.py's digest of the sources the compiled core is made of."""
    h = hashlib.sha256()
    for name in SOURCES:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def compiled_module() -> tuple[ModuleType | None, str]:
    """The compiled serving module if it is built and current, else None; and why."""
    try:
        mod = import_module(f"{PACKAGE}._serving_c")
    except ImportError:
        return None, "not built"
    if getattr(mod, "SOURCE_DIGEST", None) != source_digest():
        return None, f"stale (built from other sources than {HERE / 'serving.py'} and its peers)"
    return mod, "current"


def select() -> tuple[ModuleType, str]:
    """(the serving module to run, KIND): 'compiled', 'pure' (asked for) or 'pure: <why not compiled>'."""
    if pure_requested():
        return import_module("wadiloco.models.engine.serving"), "pure"
    mod, why = compiled_module()
    if mod is not None:
        return mod, "compiled"
    if why != "not built":
        warnings.warn(f"the compiled serving core is {why}: running the pure-Python one", stacklevel=2)
    return import_module("wadiloco.models.engine.serving"), f"pure: compiled core {why}"


serving, KIND = select()
EngineState, serve, delay_to, NO_GATE = serving.EngineState, serving.serve, serving.delay_to, serving.NO_GATE
KVPool = serving.POOL  # the block pool class the selected core was built with (models.engine.kv)
PrefixCache = serving.CACHE  # and the prefix cache class (models.engine.prefix)


def _twin(name: str) -> ModuleType:
    """models/<name>.py's compiled copy when the compiled core runs (built with it, from the same
    digest), else the module itself."""
    if KIND == "compiled":
        try:
            mod = import_module(f"{PACKAGE}._{name}_c")
            if getattr(mod, "SOURCE_DIGEST", None) == getattr(serving, "SOURCE_DIGEST", None):
                return mod
        except ImportError:  # (setup.py's extensions are optional: a failed one leaves the pure module)
            pass
    return import_module(f"wadiloco.models.{PURE[name]}")


PURE = {mod[1:-2]: src.replace("/", ".") for mod, src, _ in COMPILED}  # "fairshare": "network.fairshare", ...
fabric_core = _twin("fairshare")  # links, jobs and every shared resource's re-allocation (sim.fabric)
fair_share = fabric_core.fair_share
