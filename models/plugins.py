"""Plug-ins: packages that add names to the core's registries, which the core never imports.

A packaged plug-in is a folder of wadiloco.models with a `plugin.py` (the testbed twin's is
models/testbed/plugin.py): that one module imports the core and registers what it brings (workload
prompt sets, timetable kinds, engine-profile measurements, a policy, a scenario block that adds to a
run's result). The core's registries are `Registry` mappings, which import every packaged plug-in
before their first read, once per process, in name order; so any way into the simulator (the CLI, a
sweep worker, a test, a notebook) sees the same names, and importing the core alone imports no
plug-in. An operator's own modules come through $WADILOCO_PLUGINS (experiments.sweep.plugins).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, MutableMapping
from importlib import resources
from typing import Generic, TypeVar

PACKAGE = "wadiloco.models"
ENTRY = "plugin"  # a packaged plug-in X is the module wadiloco.models.X.plugin

_lock = threading.RLock()
_state = {"loaded": False, "loading": False}


def packaged() -> list[str]:
    """The packaged plug-ins' names: folders of wadiloco.models with a plugin.py, in name order."""
    root = resources.files(PACKAGE)
    return sorted(d.name for d in root.iterdir() if d.is_dir() and d.joinpath(f"{ENTRY}.py").is_file())


def load_packaged() -> None:
    """Import every packaged plug-in, once per process. A read of a registry while they load (a
    plug-in checking a name) sees what is registered so far; a plug-in that fails to import raises,
    and the next read tries again."""
    if _state["loaded"] or _state["loading"]:
        return
    with _lock:
        if _state["loaded"] or _state["loading"]:
            return
        _state["loading"] = True
        try:
            for name in packaged():
                importlib.import_module(f"{PACKAGE}.{name}.{ENTRY}")
            _state["loaded"] = True
        finally:
            _state["loading"] = False


K = TypeVar("K")
V = TypeVar("V")


class Registry(MutableMapping, Generic[K, V]):
    """Names to what they register, complete once the packaged plug-ins are loaded: every read
    loads them first (`load_packaged`); writing (registering) does not."""

    def __init__(self, what: str):
        self.what = what  # what a name names, for messages ("prompt set", "timetable kind")
        self._items: dict[K, V] = {}

    def __getitem__(self, key: K) -> V:
        load_packaged()
        return self._items[key]

    def __contains__(self, key: object) -> bool:
        load_packaged()
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        load_packaged()
        return iter(list(self._items))

    def __len__(self) -> int:
        load_packaged()
        return len(self._items)

    def __setitem__(self, key: K, value: V) -> None:
        self._items[key] = value

    def __delitem__(self, key: K) -> None:
        del self._items[key]

    def add(self, key: K, value: V) -> None:
        """Register `value` under a new name: one registered twice is an error (two modules, or a
        plug-in and the core, claiming it). Loads nothing, so the core may register as it is imported."""
        if key in self._items:
            raise ValueError(f"{self.what} {key!r} registered twice")
        self._items[key] = value

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {sorted(map(str, self._items))})"

    def known(self) -> str:
        """The registered names, sorted and comma-separated (for an unknown-name message)."""
        return ", ".join(sorted(map(str, self))) or "none"
