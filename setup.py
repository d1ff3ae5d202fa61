"""Build the compiled serving core: Cython, pure-Python mode, from the project's own sources.

The modules models/engine/_fast/manifest.py lists (the engine's batching, queues, heap, KV pool, prefix
cache and serving rules, and models/network/fairshare.py) stay the one source of the logic, in plain
Python; the .pxd files of models/engine/_fast add C types where they pay. At build time each source is
copied, unchanged, into the package wadiloco.models.engine._fast under its base name (engine/kv ->
`_fast.kv`), with the digest of the sources it was built from appended, and compiled there. The engine's
sources import each other relatively, so the compiled serving imports the compiled pool as the pure
one imports the pure pool. The compiled modules never shadow the .py files (they live in another
package): models/engine/_fast/__init__.py uses them only if that digest matches the sources beside it,
else it warns once and runs the pure modules (an edited serving.py in a developer's tree runs as
edited). Everything else is in setup.cfg; Cython comes from pyproject.toml's [build-system] requires.
Without Cython or a C compiler the build still installs the pure modules.
"""

from __future__ import annotations

import hashlib
import re
import runpy
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
MODELS = ROOT / "models"
FAST = MODELS / "engine" / "_fast"
# The one list of compiled sources (models/engine/_fast/manifest.py; the loader reads the same file).
_MANIFEST = runpy.run_path(str(FAST / "manifest.py"))
COMPILED, PACKAGE, DIRECTIVES = _MANIFEST["COMPILED"], _MANIFEST["PACKAGE"], _MANIFEST["DIRECTIVES"]
SOURCES, module = _MANIFEST["sources"](), _MANIFEST["module"]
RELATIVE = re.compile(r"^\s*from \.(\w*) import", re.M)


def source_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def check_imports(src: str, text: str) -> None:
    """A compiled source imports relatively only other compiled sources (their compiled twins)."""
    names = {module(s) for s in COMPILED}
    for name in RELATIVE.findall(text):
        if name not in names:
            raise RuntimeError(f"setup.py: models/{src}.py imports .{name}, which is not compiled (manifest.py)")


def generated_sources(out: Path) -> list[tuple[str, Path]]:
    """The copies Cython compiles, under out/ in PACKAGE's folder, each ending with SOURCE_DIGEST."""
    digest = source_digest(MODELS)
    folder = out.joinpath(*PACKAGE.split("."))
    folder.mkdir(parents=True, exist_ok=True)
    rel = folder.relative_to(out)
    for pkg in [rel, *rel.parents[:-1]]:
        (out / pkg / "__init__.py").touch()  # (packages, so that the copies' relative cimports resolve)
    paths = []
    for src in COMPILED:
        text = (MODELS / f"{src}.py").read_text()
        check_imports(src, text)
        text += f'\n\nSOURCE_DIGEST = "{digest}"  # setup.py: what models/engine/_fast/__init__.py checks\n'
        path = folder / f"{module(src)}.py"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        pxd = FAST / f"{module(src)}.pxd"
        if pxd.exists():
            (folder / pxd.name).write_text(pxd.read_text())
        paths.append((src, path))
    return paths


# IEEE doubles as Python computes them: no fused multiply-add, no fast-math.
C_FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math"]
# the .pxd files give the C types (models/engine/_fast/*.pxd); the .py annotations are documentation
BASE_DIRECTIVES = {
    "language_level": 3,
    "binding": False,
    "embedsignature": False,
    "annotation_typing": False,
    # Typed views index request ids and slots that the arrays' growth (EngineState._grow,
    # KVPool.room, PrefixCache._room) keeps in range; unchecked, they cost a load each.
    # Negative indices still wrap as in Python (but in the modules of manifest.DIRECTIVES).
    # The pure modules, which check every index, give the same rows bit for bit (tests/engine/test_performance.py).
    "boundscheck": False,
    "initializedcheck": False,
}


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("setup.py: Cython is not installed; the pure-Python serving core only")
        return []
    from setuptools import Extension

    out = ROOT / "build" / "cython-src"
    exts = []
    for src, path in generated_sources(out):
        # optional: a failed compile leaves the pure modules, which models/engine/_fast/__init__.py then runs
        ext = Extension(f"{PACKAGE}.{path.stem}", [str(path)], extra_compile_args=C_FLAGS, optional=True)
        exts += cythonize(
            [ext],
            compiler_directives={**BASE_DIRECTIVES, **DIRECTIVES.get(src, {})},
            include_path=[str(out)],  # where cythonize finds the copies' .pxd files
            build_dir=str(ROOT / "build" / "cython-c"),
            quiet=True,
        )
    return exts


if __name__ == "__main__":
    setup(ext_modules=extensions())
