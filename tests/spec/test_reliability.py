"""Reliability behaviours that are not a failing command (the failing commands are the
corpus in tests/bad_inputs/): what strict YAML still accepts, that the run-size estimate is near
the truth and lets every shipped input through, writing through a symlink, escaping user strings
in reports, the store folded into one file at a clean exit, a 0-byte store announced, a corridor
that cannot be reached announced, and Ctrl-C / SIGTERM during `run --out` leaving nothing behind.
SIGTERM and SIGHUP during a sweep, then --resume: tests/experiments/test_crash_safety.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from sweep_helpers import plugins_env, tiny_sweep_dict, write_sweep  # noqa: F401

from wadiloco.experiments.cli import main
from wadiloco.models.errors import InputError
from wadiloco.models.spec.limits import check_run, estimate
from wadiloco.models.spec.load import load_scenario
from wadiloco.models.spec.resolve import load
from wadiloco.models.spec.schema import load_yaml_text

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


# ---- strict YAML: what stays valid ------------------------------------------------------------


def test_strict_yaml_keeps_what_yaml_1_2_means():
    doc = load_yaml_text(
        "base: &b {islands: 2, hosts_per_island: 1}\n"
        "fleet: {<<: *b, hosts_per_island: 3}\n"  # a merge key may be overridden: not a duplicate
        "a: 1e9\nb: -2.5E-3\nc: .5\nd: 12\ne: true\nf: False\ng: ~\nh: .inf\n"
        "s: [0x1E, 010, 1_000, 1:30, yes, off]\n",
        "t.yaml",
    )
    assert doc["fleet"] == {"islands": 2, "hosts_per_island": 3}
    assert [doc[k] for k in "abcdefg"] == [1e9, -0.0025, 0.5, 12, True, False, None]
    assert doc["h"] == float("inf")
    assert doc["s"] == ["0x1E", "010", "1_000", "1:30", "yes", "off"]  # strings, as YAML 1.2 says
    assert all(type(doc[k]) is int for k in "d") and type(doc["a"]) is float


def test_an_anchored_scenario_loads_like_the_plain_one(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: x\nhorizon_s: 30\nfleet: {islands: 2, hosts_per_island: 1}\nslo: {ttft_s: 2, tpot_s: 2}\n")
    anchored = tmp_path / "anchored.yaml"
    anchored.write_text(
        "name: x\nhorizon_s: 30\nfleet: {islands: &two 2, hosts_per_island: 1}\nslo: {ttft_s: *two, tpot_s: *two}\n"
    )
    assert load_scenario(plain).digest() == load_scenario(anchored).digest()


def test_ints_stay_valid_where_floats_are_expected(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: x\nhorizon_s: 30\ndrain_s: 5\nfleet: {nic_gbps: 100}\ntraining: {step_time_s: 1}\n")
    sc = load_scenario(p)
    assert sc.horizon_s == 30.0 and sc.fleet.nic_gbps == 100.0 and sc.training.step_time_s == 1.0


# ---- run-size estimates --------------------------------------------------------------------


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_is_within_the_limits(path):
    r = load(path) if "trace" not in path.read_text() else None
    if r is None:
        pytest.skip("trace scenarios are checked through the sweeps that use them")
    est = check_run(load_scenario(path))
    assert est.events < 1e7 and est.memory_bytes < 1e9


def test_the_request_estimate_is_near_the_truth(tmp_path):
    from wadiloco.experiments.runner import run_one

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "x", "horizon_s": 120, "drain_s": 20, "workload": {"kind": "bursty"}}))
    r = load(p)
    est = estimate(load_scenario(p))
    n = run_one(r, 0, policy="no_sync").summary["requests"]
    assert 0.8 * n < est.counts["requests"] < 1.25 * n, (est.counts["requests"], n)


def test_limits_are_configurable(monkeypatch):
    sc = load_scenario(ROOT / "scenarios" / "normal.yaml")
    monkeypatch.setenv("WADILOCO_MAX_REQUESTS", "1000")
    with pytest.raises(InputError, match="WADILOCO_MAX_REQUESTS"):
        check_run(sc)
    monkeypatch.setenv("WADILOCO_MAX_REQUESTS", "1e9")
    monkeypatch.setenv("WADILOCO_MAX_EVENTS", "1e12")
    monkeypatch.setenv("WADILOCO_MAX_MEMORY_MB", "1e9")
    from wadiloco.models.spec.load import with_overrides

    check_run(with_overrides(sc, {"horizon_s": 604800}))  # raised limits let it through


def test_a_corridor_that_cannot_be_reached_is_announced(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: x\nhorizon_s: 60\ndrain_s: 5\nfleet: {islands: 2, hosts_per_island: 1}\n"
        "merge: {h_min: 100000, h_max: 100000}\npolicy: {name: fixed, params: {H: 100000}}\n"
    )
    assert main(["run", str(p)]) == 0
    out = capsys.readouterr()
    assert "cannot merge" in out.err and "merge.h_min" in out.err
    assert "merges                       0" in out.out


# ---- writes ----------------------------------------------------------------------------------


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    from wadiloco.experiments.output import write_atomic

    real = tmp_path / "real.csv"
    real.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    write_atomic(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real.csv"]  # no temp file left


def test_run_out_force_overwrites_only_its_own_result(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text("name: x\nhorizon_s: 20\ndrain_s: 5\nfleet: {islands: 2, hosts_per_island: 1}\n")
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out)]) == 0
    first = (out / "summary.json").read_bytes()
    assert main(["run", str(p), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["run", str(p), "--out", str(out), "--force", "--seed", "1"]) == 0
    assert (out / "summary.json").read_bytes() != first
    assert sorted(x.name for x in out.iterdir()) == sorted(
        [".wadiloco-result", "merges.csv", "requests.csv", "summary.json", "timeline.csv"]
    )


def _signals_as_at_a_terminal() -> None:
    """The child's Ctrl-C and hang-up as a terminal gives them: a suite started in the background
    (`cmd &` without job control, nohup) passes its children SIGINT and SIGHUP ignored."""
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_a_run_stopped_midway_leaves_no_output_folder(tmp_path, sig):
    """The output folder is made only when the run has something to write, so a run stopped in the
    middle leaves nothing; the exit code is 128 + the signal's number, without a traceback."""
    p = tmp_path / "s.yaml"
    p.write_text("name: x\nhorizon_s: 20000\ndrain_s: 10\n")  # about a minute of simulation
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wadiloco.experiments.cli", "run", str(p), "--out", str(out)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
        preexec_fn=_signals_as_at_a_terminal,
    )
    time.sleep(6)  # past start-up, well inside the simulation
    assert proc.poll() is None, "the run ended before it could be stopped"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err.decode()
    assert b"Traceback" not in err
    assert not out.exists()


# ---- a sweep's folder: the store, the report -----------------------------------------------

NASTY = "x\n# Injected heading\n<script>alert(1)</script> [link](javascript:alert(2)) | $\\frac$"


@pytest.fixture(scope="module")
def nasty_sweep(tmp_path_factory):
    """A tiny sweep whose name, description, regime name and labels are all hostile strings."""
    root = tmp_path_factory.mktemp("nasty")
    d = tiny_sweep_dict()
    d["name"] = NASTY
    d["description"] = NASTY
    d["regimes"] = [{"path": d["regimes"][0], "name": "r " + NASTY}]
    d["policies"] = [
        {"name": "no_sync"},
        {"name": "fixed", "params": {"H": 24}, "label": "<img src=x onerror=alert(3)>"},
    ]
    d["seeds"] = 1
    sweep = write_sweep(root / "nasty.yaml", d)
    out = root / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    return sweep, out


def test_report_escapes_every_user_string(nasty_sweep):
    _, out = nasty_sweep
    md = (out / "report.md").read_text()
    lines = md.splitlines()
    assert not any(line.lstrip("#").strip().startswith("Injected heading") and line.startswith("#") for line in lines)
    assert "<script>" not in md and "<img" not in md
    assert not re.search(r"(?<!\\)\]\(javascript:", md)  # an escaped bracket makes no link
    assert "&lt;script>" in md and "\\[link\\]" in md
    html_text = (out / "report.html").read_text()
    assert "<script>" not in html_text and "<img src=x" not in html_text
    assert "&lt;script&gt;" in html_text
    assert any(f.name.startswith("timeline_") for f in (out / "figures").iterdir())  # `$` did not break it


def test_a_clean_exit_folds_the_store_into_one_file(nasty_sweep):
    _, out = nasty_sweep
    wal = out / "runs.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_zero_byte_store_is_announced(nasty_sweep, tmp_path, capsys):
    sweep, _ = nasty_sweep
    out = tmp_path / "o"
    out.mkdir()
    (out / "runs.sqlite").write_bytes(b"")
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--no-progress", "--no-figures"]) == 0
    assert "empty file (0 bytes)" in capsys.readouterr().err


def test_export_through_a_symlink_keeps_the_link(nasty_sweep, tmp_path):
    _, out = nasty_sweep
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    link = tmp_path / "l.csv"
    link.symlink_to(real)
    assert main(["export", str(out), "--output", str(link)]) == 0
    assert link.is_symlink() and real.read_text().startswith("regime,")


def test_a_prompt_that_never_finishes_counts_as_a_violation(tmp_path, capsys):
    """A 10 M-token prompt cannot be served within the run: it and the requests queued behind it
    are unfinished, and each counts as an SLO violation (never hidden as NaN behind 0.00%)."""
    t = tmp_path / "t.csv"
    t.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:00.0,9999999,10\n"
        "2023-11-16 18:15:01.0,100,10\n2023-11-16 18:15:02.0,100,10\n"
    )
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: x\nhorizon_s: 10\ndrain_s: 5\nfleet: {islands: 1, hosts_per_island: 1}\n"
        "workload: {kind: trace, path: t.csv}\npolicy: {name: no_sync}\n"
    )
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "unfinished 3" in out and "SLO violation rate     100.00%" in out, out
    import json

    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    summary = s.get("summary", s)
    assert summary["unfinished"] == 3 and summary["slo_violations"] == 3
