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
import types
from pathlib import Path

from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import input_problem, read_text

PLUGINS_ENV = "WADILOCO_PLUGINS"
_LOADED: set[str] = set()


def plugin_modules() -> tuple[str, ...]:
    """The plugins $WADILOCO_PLUGINS names, .py paths made absolute (workers may run elsewhere)."""
    raw = os.environ.get(PLUGINS_ENV, "")
    parts = [p.strip() for chunk in raw.split(",") for p in chunk.split(os.pathsep)]
    return tuple(os.path.abspath(p) if p.endswith(".py") else p for p in parts if p)  # a symlink stays one


def _import(p: str) -> None:
    files = module_files(p) if not p.endswith(".py") else [Path(p)]
    for f in files:  # regular files within the input size limit (the import system reads a module's)
        problem = input_problem(f, "plugin (.py file)")
        if problem:
            who = "it" if f == Path(p) else str(f)
            what = f"{who} {problem}" if problem.startswith("is ") else f"{problem} ({who})" if who != "it" else problem
            raise InputError(f"${PLUGINS_ENV}", p, f"cannot import plugin: {what}")
    if not p.endswith(".py"):
        importlib.import_module(p)
        return
    source = read_text(p, "plugin (.py file)")
    name = "wadiloco_plugin_" + Path(p).stem
    mod = types.ModuleType(name)
    mod.__file__ = p
    sys.modules[name] = mod
    try:
        exec(compile(source, p, "exec", dont_inherit=True), mod.__dict__)  # noqa: S102 - the operator's own plugin, as an import would
    except BaseException:
        del sys.modules[name]  # a half-run module must not pass for a loaded plugin
        raise


def module_files(name: str) -> list[Path]:
    """The source files of a plugin named as a module (a package: every .py file under it), found
    without running it (its parent packages are imported); [] if it cannot be found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin or not spec.has_location:
        return []
    if spec.submodule_search_locations:
        return sorted(f for d in spec.submodule_search_locations for f in Path(d).rglob("*.py"))
    return [Path(spec.origin)]


def plugin_files(plugins: tuple[str, ...] | list[str]) -> list[Path]:
    """Every file the plugins are read from: a .py path itself, a module's source files."""
    out: list[Path] = []
    for p in plugins:
        out += [Path(p)] if p.endswith(".py") else module_files(p)
    return out


def load_plugins(plugins: tuple[str, ...] | list[str]) -> None:
    """Import each plugin once per process; a failure (an exception, or SystemExit: a plugin does not
    end the command) is the operator's input error."""
    for p in plugins:
        if p in _LOADED:
            continue
        try:
            _import(p)
        except InputError:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - reported as the user's input problem
            what = f"{type(e).__name__}: {e}" if not isinstance(e, SystemExit) else f"it called exit({e.code!r})"
            raise InputError(f"${PLUGINS_ENV}", p, f"cannot import plugin: {what}"[:500]) from None
        _LOADED.add(p)
