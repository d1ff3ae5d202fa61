"""The shipped scenarios, for tests that run every one: the list, and loading one so that a trace replay
skips (with the reason) when its trace, in the shared folder, is not beside the checkout."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "scenarios" / "testbed").glob("*.yaml"))


def load_shipped(path: Path):
    with trace_or_skip(path.name):
        return load_scenario(path)


@contextmanager
def trace_or_skip(what: str):
    """Skip (with the reason) when what is loaded inside replays a trace that is not beside the checkout
    (scenarios name theirs as ../../shared/traces/..., whatever $WADILOCO_SHARED says)."""
    try:
        yield
    except InputError as e:
        if "trace file not found" not in str(e):
            raise
        pytest.skip(f"{what}: its trace is in shared/, not found beside the checkout ({e})")
