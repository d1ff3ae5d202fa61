"""Extra policy modules named by the operator in $WADILOCO_PLUGINS.

The variable holds a comma- or os.pathsep-separated list of module names or .py file paths. It is
read from the environment only, never from a sweep or scenario file. Every command loads the
plugins before it parses its arguments (experiments/cli.py), a sweep hands the list to every
worker (local or Dask), and each process imports each plugin once, so its `@register` runs there.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from wadiloco.models.errors import InputError

PLUGINS_ENV = "WADILOCO_PLUGINS"
_LOADED: set[str] = set()


def plugin_modules() -> tuple[str, ...]:
    """The plugins $WADILOCO_PLUGINS names, .py paths made absolute (workers may run elsewhere)."""
    raw = os.environ.get(PLUGINS_ENV, "")
    parts = [p.strip() for chunk in raw.split(",") for p in chunk.split(os.pathsep)]
    return tuple(str(Path(p).resolve()) if p.endswith(".py") else p for p in parts if p)


def _import(p: str) -> None:
    if not p.endswith(".py"):
        importlib.import_module(p)
        return
    name = "wadiloco_plugin_" + Path(p).stem
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {p}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]  # a half-run module must not pass for a loaded plugin
        raise


def load_plugins(plugins: tuple[str, ...] | list[str]) -> None:
    """Import each plugin once per process; a failure is the operator's input error."""
    for p in plugins:
        if p in _LOADED:
            continue
        try:
            _import(p)
        except Exception as e:  # noqa: BLE001 - reported as the user's input problem
            raise InputError(f"${PLUGINS_ENV}", p, f"cannot import plugin: {type(e).__name__}: {e}") from None
        _LOADED.add(p)
