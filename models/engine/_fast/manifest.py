"""The compiled core's one list of sources, read by setup.py (which cannot import the package) and by
the loader (this package's __init__): each compiled module's name, the pure module it is built from
(relative to models/, without .py) and the imports its copy takes from the other compiled modules.
Every module's C types are the .pxd of the same base name in this folder."""

# (compiled module, its pure source, (import in the source, the compiled twin's import))
COMPILED = (
    ("_batching_c", "engine/batching", ()),
    ("_fairshare_c", "network/fairshare", ()),
    ("_fifo_c", "engine/_fast/fifo", ()),
    ("_heap_c", "engine/_fast/heap", ()),
    ("_kv_c", "engine/kv", ()),
    ("_prefix_c", "engine/prefix", ()),
    (
        "_serving_c",
        "engine/serving",
        (
            ("wadiloco.models.engine.batching import", "wadiloco.models.engine._fast._batching_c import"),
            ("wadiloco.models.engine.kv import", "wadiloco.models.engine._fast._kv_c import"),
            ("wadiloco.models.engine.prefix import", "wadiloco.models.engine._fast._prefix_c import"),
            (
                "wadiloco.models.engine._fast.fifo import ListFifo as RingFifo",
                "wadiloco.models.engine._fast._fifo_c import RingFifo",
            ),
            (
                "wadiloco.models.engine._fast.heap import ListHeap as KeyHeap",
                "wadiloco.models.engine._fast._heap_c import KeyHeap",
            ),
        ),
    ),
)
PACKAGE = "wadiloco.models.engine._fast"  # where the compiled modules are installed


def sources() -> tuple[str, ...]:
    """Every file (relative to models/) whose text the compiled core is made of, in digest order."""
    out = []
    for _, src, _ in COMPILED:
        out += [f"{src}.py", "engine/_fast/" + src.rsplit("/", 1)[-1] + ".pxd"]
    return tuple(out)
