"""`wadiloco`: the one entry point. Each subcommand lives in the module that owns its work and
registers itself through `add_parser(subparsers)`; this file loads the $WADILOCO_PLUGINS policy
modules (first, so every command knows their policies), dispatches, and turns `InputError` into a
one-paragraph message and exit code 2 (never a traceback)."""

from __future__ import annotations

import argparse
import importlib
import sys

from wadiloco.experiments.sweep.plugins import load_plugins, plugin_modules
from wadiloco.models.errors import InputError

# Modules that contribute subcommands; each defines add_parser(subparsers).
COMMAND_MODULES = [
    "wadiloco.experiments.commands",
    "wadiloco.experiments.planning_cli",
    "wadiloco.experiments.sweep.cli",
]


DESCRIPTION = (
    "wadiloco-sim: simulate a fleet that trains with DiLoCo and serves LLM requests on the same hardware, "
    "and ask when an outer merge is safe. `wadiloco COMMAND --help` describes each command."
)


class _Help(argparse.HelpFormatter):
    """Shows a flag's default when it has one worth saying (not None, False or an empty list)."""

    def _get_help_string(self, action):
        h = action.help or ""
        d = action.default
        quiet = d is None or d is False or d is argparse.SUPPRESS or (isinstance(d, list) and not d)
        if quiet or "%(default)" in h or "default:" in h or not action.option_strings:
            return h
        return f"{h} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kw):
        kw.setdefault("formatter_class", _Help)
        super().__init__(*args, **kw)

    def error(self, message: str):  # argparse's default exits 2 with usage; keep it, but one paragraph
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from wadiloco.experiments.provenance import git_revision, version

    p = _Parser(prog="wadiloco", description=DESCRIPTION)
    rev = git_revision()
    p.add_argument("--version", action="version", version=f"wadiloco {version()}" + (f" (git {rev})" if rev else ""))
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for mod in COMMAND_MODULES:
        importlib.import_module(mod).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        load_plugins(plugin_modules())
    except InputError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    args = build_parser().parse_args(argv)
    try:
        rc = args.func(args)
    except InputError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
