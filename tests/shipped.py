"""The shipped scenarios, for tests that run every one: the list, and loading one so that a trace replay
skips (with the reason) when its trace, in the shared folder, is not beside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "scenarios" / "testbed").glob("*.yaml"))


def load_shipped(path: Path):
    try:
        return load_scenario(path)
    except InputError as e:
        if "trace file not found" not in str(e):
            raise
        pytest.skip(f"{path.name}: its trace is in shared/, not found beside the checkout ({e})")
