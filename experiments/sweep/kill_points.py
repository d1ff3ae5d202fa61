"""Recorded crash points for the crash tests.

$WADILOCO_TEST_KILL_AT makes the sweep's own process SIGKILL itself at one named point, so a test
knows exactly what was stored when it died (a kill from outside after a sleep or a poll lands
wherever the scheduler happens to be). The points:

- `store-opened`: the store file and its tables exist, no plan is recorded yet;
- `plan-stored`: the plan is recorded, no run is submitted yet;
- `rows=N`: right after the store has committed a row and holds N rows;
- `wrote:<file>`: right after the report wrote that output (e.g. `wrote:runs.csv`).

$WADILOCO_TEST_KILL_SIGNAL (TERM, HUP, INT; default KILL) sends another signal instead, so a test
can stop a sweep at a known point the way a service manager or a closed terminal would.

Unset (always, outside the tests) a check costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

KILL_ENV = "WADILOCO_TEST_KILL_AT"
SIGNAL_ENV = "WADILOCO_TEST_KILL_SIGNAL"


def _die() -> None:
    name = os.environ.get(SIGNAL_ENV, "KILL").upper()
    os.environ.pop(KILL_ENV, None)  # once: a handled signal unwinds past later kill points
    os.kill(os.getpid(), getattr(signal, f"SIG{name}", signal.SIGKILL))


def kill_point(point: str) -> None:
    if os.environ.get(KILL_ENV) == point:
        _die()


def kill_after_commit(store) -> None:
    """Called after each row the store commits."""
    at = os.environ.get(KILL_ENV)
    if at and at.startswith("rows=") and sum(store.counts().values()) == int(at[len("rows=") :]):
        _die()
