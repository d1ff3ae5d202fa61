"""`wadiloco`: the one entry point. Each subcommand lives in the module that owns its work and
registers itself through `add_parser(subparsers)`; this file loads the $WADILOCO_PLUGINS policy
modules (first, so every command knows their policies), dispatches, and is the one error path of
every command: an input, OS or resource error becomes one message naming the file and the field
and exit code 2, never a traceback. SIGTERM and SIGHUP unwind like Ctrl-C (each command cleans up
what it started) and exit 128 + the signal's number; a closed standard output (`| head`) ends
quietly, as other Unix tools do.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable

from wadiloco.experiments.sweep.plugins import load_plugins, plugin_modules
from wadiloco.models.errors import InputError

# Modules that contribute subcommands; each defines add_parser(subparsers).
COMMAND_MODULES = [
    "wadiloco.experiments.commands",
    "wadiloco.experiments.planning_cli",
    "wadiloco.experiments.safe",
    "wadiloco.experiments.network_cli",
    "wadiloco.experiments.sweep.cli",
]
EXIT_INPUT = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug, not the user's input
EXIT_PIPE = 128 + signal.SIGPIPE
DEBUG_ENV = "WADILOCO_DEBUG"  # =1: let an unexpected exception show its traceback


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so that it unwinds like Ctrl-C."""

    def __init__(self, signum: int | str):
        # SimPy re-raises a process's exception as type(e)(*e.args), i.e. with the signal's name
        sig = signal.Signals[signum] if isinstance(signum, str) else signal.Signals(signum)
        super().__init__(sig.name)
        self.signum = int(sig)


def exit_code(e: KeyboardInterrupt) -> int:
    return 128 + (e.signum if isinstance(e, Stopped) else signal.SIGINT)


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

    def error(self, message: str):  # argparse's default prints the whole usage first; one line instead
        sys.stderr.write(f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")
        raise SystemExit(EXIT_INPUT)


def build_parser() -> argparse.ArgumentParser:
    from wadiloco.experiments.provenance import git_revision, version

    p = _Parser(prog="wadiloco", description=DESCRIPTION)
    rev = git_revision()
    p.add_argument("--version", action="version", version=f"wadiloco {version()}" + (f" (git {rev})" if rev else ""))
    p.add_argument(
        "--pure",
        action="store_true",
        help="run the pure-Python serving core, as $WADILOCO_PURE=1 does (the same results, slower; "
        "sweep workers on this machine inherit it, Dask workers need the variable set themselves)",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for mod in COMMAND_MODULES:
        importlib.import_module(mod).add_parser(sub)
    return p


def _pure() -> None:
    os.environ["WADILOCO_PURE"] = "1"  # before models/engine/_fast is first imported: it picks the core then
    from wadiloco.models.engine import _fast as core

    if core.KIND != "pure":
        raise InputError("--pure", "", "the serving core was chosen before --pure was read (a plugin imported it)")


def _say(text: str) -> None:
    try:
        sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # no stderr to say it on


def _stdout_gone() -> None:
    """Point standard output at /dev/null, so the interpreter's own flush at exit cannot fail."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def _on_signal(signum, frame):
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # once: the clean-up it starts is not cut short by a second
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    main_thread = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGHUP)} if main_thread else {}
    try:
        return _main(argv)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _main(argv: list[str] | None) -> int:
    def command() -> int:
        load_plugins(plugin_modules())
        args = build_parser().parse_args(argv)
        if args.pure:
            _pure()
        return args.func(args)

    return one_error_path(command)


def one_error_path(command: Callable[[], int | None]) -> int:
    """Run `command` (a subcommand, or a study's table script) and turn whatever it raises into one
    message and an exit code: 2 for input, OS and resource errors, 70 for a bug, 128 + N for a signal."""
    try:
        rc = command()
        sys.stdout.flush()
        return int(rc or 0)
    except InputError as e:
        _say(f"error: {e}")
    except KeyboardInterrupt as e:
        if not getattr(e, "reported", False):
            _say(f"stopped by {e}" if isinstance(e, Stopped) else "interrupted")
        return exit_code(e)
    except BrokenPipeError:
        _stdout_gone()  # the reader went away (`| head`): end quietly
        return EXIT_PIPE
    except OSError as e:
        return _os_error(e)
    except MemoryError:
        _say("error: out of memory; make the run smaller (see `wadiloco run --help` and docs/input_safety.md)")
    except RecursionError:
        _say("error: an input is nested too deeply to process")
    except Exception as e:  # noqa: BLE001 - no traceback, ever; but say it is ours
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        _say(
            f"internal error: {type(e).__name__}: {e} (a bug, or an input the checks missed; {DEBUG_ENV}=1 shows where)"
        )
        return EXIT_INTERNAL
    return EXIT_INPUT


def _os_error(e: OSError) -> int:
    stdout_failed = e.filename is None and e.errno in (errno.ENOSPC, errno.EIO, errno.EBADF, errno.EPIPE)
    if stdout_failed:
        _stdout_gone()
        _say(f"error: cannot write to standard output: {e.strerror or e}")
    else:
        where = f"{e.filename}: " if e.filename else ""
        _say(f"error: {where}{e.strerror or e}")
    return EXIT_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
