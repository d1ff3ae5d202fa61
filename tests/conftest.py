"""Shared test fixtures, the `--update-golden` flag and the `slow` marker (setup.cfg)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

# Every simulation in the suite checks the invariants (models/results/invariants.py) at the end of its run,
# including those in xdist workers, sweep worker processes and CLI subprocesses, which inherit this.
# WADILOCO_CHECK_INVARIANTS=0 in the environment turns that off.
os.environ.setdefault("WADILOCO_CHECK_INVARIANTS", "1")
# Fitted engine profiles (models.engine.profiles) are cached in a folder of this test run, not the user's.
if "WADILOCO_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["WADILOCO_CACHE_DIR"] = tempfile.mkdtemp(prefix="wadiloco-test-cache-")


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/ from the current code instead of comparing with it (see tests/golden/README.md)",
    )
    parser.addoption(
        "--update-notebooks",
        action="store_true",
        default=False,
        help="write the executed notebooks, outputs included, back to notebooks/ (see notebooks/README.md)",
    )


@pytest.fixture(scope="session")
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


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


def _merge(base: dict, patch: dict) -> dict:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _derive(src: Path, dest_dir: Path, patch: dict[str, Any] | None = None) -> Path:
    doc = _merge(yaml.safe_load(Path(src).read_text()), patch or {})
    trace = doc.get("workload", {}).get("path")
    if trace is not None and not Path(trace).is_absolute():
        path = (Path(src).parent / trace).resolve()
        shared = _find_shared()
        if not path.is_file() and shared is not None:
            path = shared / "traces" / Path(trace).name
        doc["workload"]["path"] = str(path)
    dest = Path(dest_dir) / Path(src).name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


@pytest.fixture(scope="session")
def derive_scenario():
    """`derive(src, dest_dir, patch) -> path`: a copy of the shipped scenario `src` in `dest_dir` with
    `patch` merged into its YAML (nested mappings), so a test runs the shipped file's content at a
    smaller size. A relative trace path becomes absolute: resolved next to `src` as shipped or, when
    the checkout is not beside shared/ (a worktree with $WADILOCO_SHARED), found in shared/traces."""
    return _derive
