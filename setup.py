"""Build the compiled serving core: Cython, pure-Python mode, from the project's own sources.

models/engine/batching.py, kv.py and serving.py stay the one source of the engine's logic, and
models/network/fairshare.py of the fabric's re-allocations (plain Python; models/*.pxd beside them add C types
where they pay). At build time each is copied under a name of its own (`wadiloco.models.engine._fast._batching_c`,
`_fairshare_c`, `_kv_c`, `_prefix_c`, `_serving_c`; the compiled serving imports
the compiled batching, KV pool and prefix cache, and _fast/heap.py's `_heap_c` KeyHeap in place of ListHeap) with
the digest of the sources it was built from, and compiled. The compiled module never shadows the .py:
models/engine/_fast/__init__.py imports it only if that digest matches the sources beside it, else it warns once and
runs the pure modules (an edited serving.py in a developer's tree runs as edited). Everything else is
in setup.cfg; Cython comes from pyproject.toml's [build-system] requires. Without Cython or a C
compiler the build still installs the pure modules.
"""

from __future__ import annotations

import hashlib
import runpy
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
MODELS = ROOT / "models"
# The one list of compiled sources (models/engine/_fast/manifest.py; the loader reads the same file).
_MANIFEST = runpy.run_path(str(MODELS / "engine" / "_fast" / "manifest.py"))
MODULES, PACKAGE, SOURCES = _MANIFEST["COMPILED"], _MANIFEST["PACKAGE"], _MANIFEST["sources"]()


def source_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def generated_sources(out: Path) -> list[Path]:
    """The copies Cython compiles, under out/ in PACKAGE's folders, each ending with SOURCE_DIGEST."""
    digest = source_digest(MODELS)
    folder = out.joinpath(*PACKAGE.split("."))
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for mod, src, renames in MODULES:
        text = (MODELS / f"{src}.py").read_text()
        for old, new in renames:
            if old not in text:
                raise RuntimeError(f"setup.py: models/{src}.py no longer has {old!r}; update MODULES")
            text = text.replace(old, new)
        text += f'\n\nSOURCE_DIGEST = "{digest}"  # setup.py: what models/engine/_fast/__init__.py checks\n'
        path = folder / f"{mod}.py"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        pxd = MODELS / "engine" / "_fast" / (src.rsplit("/", 1)[-1] + ".pxd")
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
            f"{PACKAGE}.{p.stem}",
            [str(p)],
            # IEEE doubles as Python computes them: no fused multiply-add, no fast-math.
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,  # a failed compile leaves the pure modules, which models/engine/_fast/__init__.py then runs
        )
        for p in generated_sources(out)
    ]
    return cythonize(
        exts,
        # the .pxd files give the C types (models/engine/_fast/*.pxd); the .py annotations are documentation
        compiler_directives={
            "language_level": 3,
            "binding": False,
            "embedsignature": False,
            "annotation_typing": False,
            # Typed views index request ids and slots that the arrays' growth (EngineState._grow,
            # KVPool.room, PrefixCache._room) keeps in range; unchecked, they cost a load each.
            # Negative indices still wrap as in Python. The pure modules, which check every index,
            # give the same rows bit for bit (tests/engine/test_performance.py).
            "boundscheck": False,
            "initializedcheck": False,
        },
        include_path=[str(out)],  # where cythonize finds the copies' .pxd files (the copies have no package)
        build_dir=str(ROOT / "build" / "cython-c"),
        quiet=True,
    )


if __name__ == "__main__":
    setup(ext_modules=extensions())
