"""Helpers shared by the sweep tests (test_sweep, test_crash_safety, test_determinism_sweep).

The tiny sweep is `experiments/smoke.yaml` shrunk to 60 s horizons on a 2-host fleet (about 0.1 s
per run once a worker has started), plus two test-only policies from tests/sweep_plugins.py, which
reach spawned and Dask workers through $WADILOCO_PLUGINS. A test module that uses these helpers
imports `plugins_env` too, so that autouse fixture sets $WADILOCO_PLUGINS for the module.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = str(Path(__file__).resolve().parent / "sweep_plugins.py")
TINY_OVERRIDES = {
    "drain_s": 20,
    "fleet.islands": 2,
    "fleet.hosts_per_island": 1,
    "merge.h_min": 16,
    "merge.h_max": 48,
    "monitor.check_invariants": True,
}


@pytest.fixture(scope="module", autouse=True)
def plugins_env():
    old = os.environ.get("WADILOCO_PLUGINS")
    os.environ["WADILOCO_PLUGINS"] = PLUGIN
    for k in ("WADILOCO_TEST_FAIL_SEEDS", "WADILOCO_TEST_KILL_AT"):
        os.environ.pop(k, None)
    yield
    if old is None:
        os.environ.pop("WADILOCO_PLUGINS", None)
    else:
        os.environ["WADILOCO_PLUGINS"] = old
    # leave the registry as other test modules expect it
    from wadiloco.experiments.sweep import plugins
    from wadiloco.models.policies import POLICIES

    for name in ("test_probe", "test_matched"):
        POLICIES.pop(name, None)
    plugins._LOADED.discard(PLUGIN)


def tiny_sweep_dict() -> dict:
    """smoke.yaml, shrunk, with absolute regime paths and the two test-only policies added."""
    d = yaml.safe_load((ROOT / "experiments" / "smoke.yaml").read_text())
    base = ROOT / "experiments"
    d["regimes"] = [str((base / (r if isinstance(r, str) else r["path"])).resolve()) for r in d["regimes"]]
    d["horizon_s"] = 60
    d["overrides"] = {**d.get("overrides", {}), **TINY_OVERRIDES}
    for p in d["policies"]:
        if p["name"] == "fixed":
            p["params"] = {"H": 24}  # inside the shrunk corridor
    d["policies"] = d["policies"] + [
        {"name": "test_probe", "params": {"H": 32}},
        {"name": "test_matched", "references": ["test_probe"]},
    ]
    d["bootstrap"] = {"n_resamples": 500, "method": "BCa", "seed": 0}
    return d


def write_sweep(path: Path, d: dict) -> Path:
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def store_rows(out: Path, columns: str = "status, attempts") -> list[tuple]:
    """The store's rows (key columns first, then `columns`), in key order, read-only."""
    con = sqlite3.connect(f"file:{out / 'runs.sqlite'}?mode=ro", uri=True)
    try:
        return con.execute(
            f"SELECT scenario_hash, policy_label, params_hash, seed, draw, {columns} FROM runs ORDER BY 1, 2, 3, 4, 5"
        ).fetchall()
    finally:
        con.close()


def total_runs(sweep: Path) -> int:
    from wadiloco.experiments.sweep import load_sweep

    return len(load_sweep(sweep).tasks())


def spawn_sweep(sweep: Path, out: Path, extra_env: dict, *args) -> subprocess.Popen:
    """`wadiloco sweep` in a subprocess that leads its own process group (it and its workers)."""
    env = {**os.environ, "WADILOCO_PLUGINS": PLUGIN, **extra_env}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wadiloco.experiments.cli",
            "sweep",
            str(sweep),
            "--out",
            str(out),
            "--no-progress",
            *args,
        ],
        env=env,
        cwd=str(ROOT),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def ok_count(out: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{out / 'runs.sqlite'}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT count(*) FROM runs WHERE status = 'ok'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def group_members(pgid: int) -> set[int]:
    """Live (non-zombie) processes in a process group, from /proc."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.add(int(d.name))
    return out


def run_until_killed(sweep: Path, out: Path, point: str, *args, env: dict | None = None) -> None:
    """`wadiloco sweep` in a subprocess that SIGKILLs itself at a recorded point
    ($WADILOCO_TEST_KILL_AT, see experiments/sweep/kill_points.py). Only the main process dies, as
    under the OOM killer; its worker processes must notice and exit on their own. The timeouts
    only keep a broken sweep from hanging the suite; nothing depends on how fast anything is."""
    proc = spawn_sweep(sweep, out, {**(env or {}), "WADILOCO_TEST_KILL_AT": point}, *args)
    try:
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers: a process group we started
        proc.wait()
        pytest.fail(f"the sweep never reached its kill point {point}")
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point}: rc {proc.returncode}, {err.decode()[-2000:]}"
    t0 = time.monotonic()
    while group_members(proc.pid):
        if time.monotonic() - t0 > 120:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("worker processes outlived the killed sweep")
        time.sleep(0.05)
