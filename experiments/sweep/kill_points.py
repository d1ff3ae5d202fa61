"""Recorded crash points for the crash tests.

$WADILOCO_TEST_KILL_AT makes the sweep's own process SIGKILL itself at one named point, so a test
knows exactly what was stored when it died (a kill from outside after a sleep or a poll lands
wherever the scheduler happens to be). The points:

- `store-opened`: the store file and its tables exist, no plan is recorded yet;
- `plan-stored`: the plan is recorded, no run is submitted yet;
- `rows=N`: right after the store has committed a row and holds N rows;
- `wrote:<file>`: right after the report wrote that output (e.g. `wrote:runs.csv`).

Unset (always, outside the tests) a check costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

KILL_ENV = "WADILOCO_TEST_KILL_AT"


def kill_point(point: str) -> None:
    if os.environ.get(KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def kill_after_commit(store) -> None:
    """Called after each row the store commits."""
    at = os.environ.get(KILL_ENV)
    if at and at.startswith("rows=") and sum(store.counts().values()) == int(at[len("rows=") :]):
        os.kill(os.getpid(), signal.SIGKILL)
