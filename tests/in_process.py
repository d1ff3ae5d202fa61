"""The CLI run inside the test's process: what it returns or exits with, and what it printed."""

from __future__ import annotations

from wadiloco.experiments.cli import main


def cli(capsys, *argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `wadiloco ARGV` (argparse's own usage errors exit via SystemExit)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err
