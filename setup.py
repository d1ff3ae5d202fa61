"""Build the compiled serving core (issue 16): Cython, pure-Python mode, from the project's own sources.

models/batching.py, models/kv.py and models/serving.py stay the one source of the engine's logic, and
models/fairshare.py of the fabric's re-allocations (plain Python; models/*.pxd beside them add C types
where they pay). At build time each is copied under a name of its own (`wadiloco.models._batching_c`,
`_fairshare_c`, `_kv_c`, `_prefix_c`, `_serving_c`; the compiled serving imports
the compiled batching, KV pool and prefix cache, and models/heap.py's `_heap_c` KeyHeap in place of ListHeap) with
the digest of the sources it was built from, and compiled. The compiled module never shadows the .py:
models/core.py imports it only if that digest matches the sources beside it, else it warns once and
runs the pure modules (an edited serving.py in a developer's tree runs as edited). Everything else is
in setup.cfg; Cython comes from pyproject.toml's [build-system] requires. Without Cython or a C
compiler the build still installs the pure modules.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
MODELS = ROOT / "models"
# (compiled module, its source, the imports its copy takes from the compiled modules instead)
MODULES = (
    ("_batching_c", "batching", ()),
    ("_fairshare_c", "fairshare", ()),
    ("_fifo_c", "fifo", ()),
    ("_heap_c", "heap", ()),
    ("_kv_c", "kv", ()),
    ("_prefix_c", "prefix", ()),
    (
        "_serving_c",
        "serving",
        (
            ("wadiloco.models.batching import", "wadiloco.models._batching_c import"),
            ("wadiloco.models.kv import", "wadiloco.models._kv_c import"),
            ("wadiloco.models.prefix import", "wadiloco.models._prefix_c import"),
            ("wadiloco.models.fifo import ListFifo as RingFifo", "wadiloco.models._fifo_c import RingFifo"),
            ("wadiloco.models.heap import ListHeap as KeyHeap", "wadiloco.models._heap_c import KeyHeap"),
        ),
    ),
)
# Every file whose text the compiled core is made of: each module's .py and .pxd (models/core.py lists
# the same names, since it cannot read this file at run time; tests/test_performance.py keeps them equal).
SOURCES = tuple(f"{src}.{ext}" for _, src, _ in MODULES for ext in ("py", "pxd"))


def source_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def generated_sources(out: Path) -> list[Path]:
    """The copies Cython compiles, under out/wadiloco/models/, each ending with SOURCE_DIGEST."""
    digest = source_digest(MODELS)
    folder = out / "wadiloco" / "models"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for mod, src, renames in MODULES:
        text = (MODELS / f"{src}.py").read_text()
        for old, new in renames:
            if old not in text:
                raise RuntimeError(f"setup.py: models/{src}.py no longer has {old!r}; update MODULES")
            text = text.replace(old, new)
        text += f'\n\nSOURCE_DIGEST = "{digest}"  # setup.py: what models/core.py checks\n'
        path = folder / f"{mod}.py"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        pxd = MODELS / f"{src}.pxd"
        if pxd.exists():
            (folder / f"{mod}.pxd").write_text(pxd.read_text())
        paths.append(path)
    return paths


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("setup.py: Cython is not installed; the pure-Python serving core only")
        return []
    from setuptools import Extension

    out = ROOT / "build" / "cython-src"
    exts = [
        Extension(
            f"wadiloco.models.{p.stem}",
            [str(p)],
            # IEEE doubles as Python computes them: no fused multiply-add, no fast-math.
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,  # a failed compile leaves the pure modules, which models/core.py then runs
        )
        for p in generated_sources(out)
    ]
    return cythonize(
        exts,
        # the .pxd files give the C types (models/*.pxd); the .py annotations are documentation
        compiler_directives={
            "language_level": 3,
            "binding": False,
            "embedsignature": False,
            "annotation_typing": False,
            # Typed views index request ids and slots that the arrays' growth (EngineState._grow,
            # KVPool.room, PrefixCache._room) keeps in range; unchecked, they cost a load each.
            # Negative indices still wrap as in Python. The pure modules, which check every index,
            # give the same rows bit for bit (tests/test_performance.py).
            "boundscheck": False,
            "initializedcheck": False,
        },
        include_path=[str(out)],  # where cythonize finds wadiloco/models/_*_c.pxd (the copies have no package)
        build_dir=str(ROOT / "build" / "cython-c"),
        quiet=True,
    )


if __name__ == "__main__":
    setup(ext_modules=extensions())
