"""Determinism of a whole sweep: the exported files are byte-identical across two runs, across 1
and 2 workers, and across processes with different hash seeds (PYTHONHASHSEED changes the order
of sets and dicts of strings, so a result that leaned on it would differ here).

Local vs Dask is asserted in tests/experiments/test_sweep.py::test_dask_backend_gives_identical_runs_csv, and
a sweep killed and resumed on another worker count in tests/experiments/test_crash_safety.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pandas as pd
from sweep_helpers import plugins_env, spawn_sweep, store_rows, tiny_sweep_dict, write_sweep  # noqa: F401

from wadiloco.experiments.cli import main

SEEDS = 2
OUTPUTS = ("runs.csv", "summary.csv", "comparisons.csv", "load_check.csv", "report.md")


def _store(out: Path) -> list[tuple]:
    return store_rows(out, "status, summary_json, timeline_json, reference_json, detail")


def _same(a: Path, b: Path) -> None:
    for f in OUTPUTS:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f"{f} differs between {a.name} and {b.name}"
    assert _store(a) == _store(b), f"the stored results differ between {a.name} and {b.name}"


def test_same_sweep_gives_identical_outputs(tmp_path):
    """Three runs of one sweep: in this process on 2 workers, and meanwhile in two other processes
    (other hash seeds) on 2 and on 1 worker. Outputs, exports and stored results are identical."""
    d = tiny_sweep_dict()
    d["seeds"] = SEEDS
    sweep = write_sweep(tmp_path / "tiny.yaml", d)
    others = {f"w{w}_hash{h}": (w, h) for w, h in ((2, "1"), (1, "2024"))}
    procs = {
        name: spawn_sweep(sweep, tmp_path / name, {"PYTHONHASHSEED": h}, "--workers", str(w), "--no-figures")
        for name, (w, h) in others.items()
    }
    try:
        first = tmp_path / "in_process_w2"
        assert main(["sweep", str(sweep), "--out", str(first), "--workers", "2", "--no-progress", "--no-figures"]) == 0
        for name, proc in procs.items():
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"{name}: {err.decode()[-3000:]}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # process groups this test started
                proc.wait()
    assert pd.read_csv(first / "runs.csv").shape[0] == 2 * SEEDS * 8
    for name in others:
        _same(first, tmp_path / name)
    for fmt in ("csv", "parquet"):
        exports = []
        for out in [first, *(tmp_path / n for n in others)]:
            exports.append(tmp_path / f"{out.name}.{fmt}")
            assert main(["export", str(out), "--format", fmt, "--output", str(exports[-1])]) == 0
        assert len({e.read_bytes() for e in exports}) == 1, f"the {fmt} exports differ"


def test_invariant_switch_is_on_in_the_suite(monkeypatch):
    """tests/conftest.py sets $WADILOCO_CHECK_INVARIANTS, so every Fleet in the suite (and in the
    sweep workers and CLI subprocesses above, which inherit it) checks the invariants; an
    explicit check=False still wins, and the variable set to 0 leaves the scenario's choice."""
    from sweep_helpers import ROOT

    from wadiloco.models.spec.load import load_scenario, with_overrides
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.sim.fleet import Fleet

    assert os.environ.get("WADILOCO_CHECK_INVARIANTS") == "1"
    sc = with_overrides(
        load_scenario(ROOT / "scenarios" / "normal.yaml"), {"horizon_s": 5, "monitor.check_invariants": False}
    )
    assert Fleet(resolve(sc), 0).check is True
    assert Fleet(resolve(sc), 0, check=False).check is False
    monkeypatch.setenv("WADILOCO_CHECK_INVARIANTS", "0")
    assert Fleet(resolve(sc), 0).check is False
