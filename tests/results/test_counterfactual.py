"""Every answer against its counterfactual: `run` pairs the run with no_sync on the same seed and leads
with the sync-excess; a fleet with training off is a real run without training's work; a merge still
running at the end of a run is recorded as unfinished, with the violations during it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from wadiloco.experiments.cli import main
from wadiloco.experiments.runner import run_one
from wadiloco.models.spec.load import load_scenario, with_overrides

ROOT = Path(__file__).resolve().parents[2]
BURSTY = str(ROOT / "scenarios" / "bursty.yaml")
SHORT = ["--set", "horizon_s=200", "--set", "drain_s=40", "--set", "merge.h_min=64"]


def _cli(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_run_leads_with_the_sync_excess_against_no_sync(capsys):
    """The acceptance: `wadiloco run scenarios/bursty.yaml` shows the paired no_sync figures and the
    sync-excess first, and calls the per-phase counts what they are (overlap, not cause)."""
    rc, out, _ = _cli(["run", BURSTY], capsys)
    lines = out.splitlines()
    assert rc == 0 and lines[1].startswith("sync-excess") and "under no_sync" in lines[1]
    assert lines[2].lstrip().startswith("paired by request")
    assert "violations overlapping phase" in out and "violations by phase" not in out
    assert "its no_sync twin" in lines[0]


def test_paired_figures_are_the_no_sync_run_on_the_same_seed(capsys):
    rc, out, _ = _cli(["run", BURSTY, *SHORT, "--param", "H=64", "--seed", "3", "--json"], capsys)
    s = json.loads(out)
    sc = with_overrides(load_scenario(BURSTY), {"horizon_s": 200, "drain_s": 40, "merge.h_min": 64})
    base = run_one(sc, 3, "no_sync", {}).summary
    b = s["baseline"]
    assert rc == 0 and b["policy"] == "no_sync" and b["slo_violations"] == base["slo_violations"]
    assert b["arrivals_hash"] == s["arrivals_hash"]  # the same requests (common random numbers)
    assert s["sync_excess"] == s["slo_violation_rate"] - base["slo_violation_rate"]
    assert s["extra_violations"] == s["slo_violations"] - base["slo_violations"]
    pr = s["by_request"]
    assert pr["only_with_merges"] - pr["only_without_merges"] == s["extra_violations"]
    assert sum(pr["only_with_merges_by_phase"].values()) == pr["only_with_merges"]
    assert sum(pr["only_without_merges_by_phase"].values()) == pr["only_without_merges"]
    if s["slo_violations"]:
        assert s["merges_violation_share"] == s["extra_violations"] / s["slo_violations"]


def test_no_baseline_skips_the_paired_run(capsys, tmp_path):
    rc, out, _ = _cli(["run", BURSTY, *SHORT, "--no-baseline", "--json"], capsys)
    assert rc == 0 and "baseline" not in json.loads(out) and "sync_excess" not in json.loads(out)
    rc, out, _ = _cli(["run", BURSTY, *SHORT, "--policy", "no_sync"], capsys)
    assert rc == 0 and "sync-excess" not in out  # no_sync is its own baseline
    rc, _, _ = _cli(["run", BURSTY, *SHORT, "--out", str(tmp_path / "o")], capsys)
    req = pd.read_csv(tmp_path / "o" / "requests.csv")
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    only_with = int((req["slo_violated"] & ~req["slo_violated_no_sync"]).sum())
    assert rc == 0 and only_with == summary["by_request"]["only_with_merges"]


def test_training_off_is_no_sync_where_training_touches_nothing_of_serving():
    """With the sidecar on its own GPU, merges-only GPU sharing and unlimited host cores, no_sync's inner
    steps touch nothing serving uses: training off serves every request exactly as no_sync does. Under
    time slicing they hold the serving GPU, and training off serves faster."""
    sc = with_overrides(load_scenario(BURSTY), {"horizon_s": 120, "drain_s": 30})
    off = with_overrides(sc, {"training.enabled": False})
    a, b = run_one(sc, 1, "no_sync", {}), run_one(off, 1, "fixed", {"H": 128})
    assert b.summary["inner_steps"] == 0 and b.summary["merges"] == 0 and b.decisions == []
    for k in ("arrival", "first_token", "finish"):
        assert np.array_equal(a.requests[k], b.requests[k], equal_nan=True)
    ts = {"fleet.colocation": "same_gpu", "fleet.gpu_sharing": "timeslice"}
    on, free = run_one(with_overrides(sc, ts), 1, "no_sync", {}), run_one(with_overrides(off, ts), 1, "no_sync", {})
    assert free.summary["e2e_p50_s"] < 0.8 * on.summary["e2e_p50_s"]
    assert free.summary["contended_iterations"] == 0 < on.summary["contended_iterations"]


def test_a_merge_running_at_the_end_is_recorded_unfinished(capsys, tmp_path):
    """A 70B-parameter model's checkpoint does not finish in the run: the merge is in merges.csv with
    `unfinished`, in the summary's count and the text, and the violations during it are its phase's."""
    sets = ["--set", "training.params=7e10", "--set", "fleet.interisland_gbps=10", "--set", "horizon_s=300"]
    rc, out, _ = _cli(["run", BURSTY, *sets, "--param", "H=128", "--check", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0 and "still running at the end (unfinished)" in out
    m = pd.read_csv(tmp_path / "o" / "merges.csv")
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert list(m["unfinished"]) == [True] and m["end_s"].iloc[0] == s["sim_time_s"]
    assert s["merges"] == 0 and s["merges_unfinished"] == 1 and s["unfinished_merge_step"] == 128
    req = pd.read_csv(tmp_path / "o" / "requests.csv")
    during = req[req["merge_index"] == 0]
    assert len(during) and (during["merge_phase"] != "").all()
    assert s["violations_by_phase"]["none"] < s["slo_violations"]  # attributed to the merge, not to `none`
