"""The compiled core's one list of sources, read by setup.py (which cannot import the package) and by
the loader (this package's __init__).

Each source (relative to models/, without .py) is compiled as a module of this package under its base
name (engine/kv -> wadiloco.models.engine._fast.kv), with the C types of the .pxd of that name in this
folder. The engine's sources import each other relatively (`from .kv import KVPool`), so the compiled
serving finds the compiled pool beside it, as the pure one finds the pure pool: the copies setup.py
compiles are the sources' text, unchanged but for the digest it appends. A relative import must name
another compiled source (setup.py checks). DIRECTIVES: Cython directives of one module beyond setup.py's."""

PACKAGE = "wadiloco.models.engine._fast"  # where the compiled modules are installed
COMPILED = (
    "engine/batching",
    "engine/fifo",
    "engine/heap",
    "engine/kv",
    "engine/laws",
    "engine/preemption",
    "engine/prefix",
    "engine/serving",
    "network/fairshare",
)
# Every index into these modules' typed views is masked or counted from 0 (a ring, a heap, link indices).
DIRECTIVES = {name: {"wraparound": False} for name in ("engine/fifo", "engine/heap", "network/fairshare")}


def module(src: str) -> str:
    """A source's compiled module name within PACKAGE (its base name)."""
    return src.rsplit("/", 1)[-1]


def sources() -> tuple[str, ...]:
    """Every file (relative to models/) whose text the compiled core is made of, in digest order."""
    out = []
    for src in COMPILED:
        out += [f"{src}.py", f"engine/_fast/{module(src)}.pxd"]
    return tuple(out)
