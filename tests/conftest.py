"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every simulation in the suite checks the invariants (models/invariants.py) at the end of its run,
# including those in xdist workers, sweep worker processes and CLI subprocesses, which inherit this.
# WADILOCO_CHECK_INVARIANTS=0 in the environment turns that off.
os.environ.setdefault("WADILOCO_CHECK_INVARIANTS", "1")


def _find_shared() -> Path | None:
    """The shared data folder: ../shared next to the checkout, else $WADILOCO_SHARED."""
    candidates = [Path(__file__).resolve().parents[2] / "shared"]
    if os.environ.get("WADILOCO_SHARED"):
        candidates.append(Path(os.environ["WADILOCO_SHARED"]).expanduser())
    for c in candidates:
        if c.is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """Path to shared/ (traces, calibration); skips the test if it is not available."""
    found = _find_shared()
    if found is None:
        pytest.skip(
            "shared data folder not found: expected ../shared next to the checkout or WADILOCO_SHARED pointing at it"
        )
    return found
