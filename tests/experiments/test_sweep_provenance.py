"""A sweep folder's provenance: the record `run` writes (resolved inputs, version, git revision),
for the whole run set, kept in the store and written out as provenance.json; a --resume adds its
own session and changes nothing else."""

from __future__ import annotations

import json
import sqlite3

from sweep_helpers import tiny_sweep_dict, write_sweep

from wadiloco.experiments import provenance
from wadiloco.experiments.cli import main


def _sweep(tmp_path):
    d = tiny_sweep_dict()
    d["regimes"] = d["regimes"][:1]
    d["policies"] = [
        {"name": "no_sync"},
        {"name": "fixed", "params": {"H": 24}},
        {"name": "matched_random", "references": ["fixed"], "draws": 1},
    ]
    d["seeds"] = 1
    return write_sweep(tmp_path / "prov.yaml", d)


def test_sweep_records_provenance_and_a_resume_adds_its_session(tmp_path, monkeypatch):
    sweep, out = _sweep(tmp_path), tmp_path / "out"
    argv = ["sweep", str(sweep), "--out", str(out), "--workers", "1", "--no-progress", "--no-figures"]
    assert main(argv) == 0
    first = json.loads((out / "provenance.json").read_text())
    assert first["version"] == provenance.version() and "git_revision" in first
    assert first["sweep_file"] == str(sweep) and first["seeds"] == [0]
    (reg,) = first["regimes"]
    assert set(first["sources"]) == {str(sweep), reg["scenario_file"]}
    assert all(len(h) == 64 for h in [*first["sources"].values(), *first["inputs"].values()]) and first["inputs"]
    sc = reg["scenario"]
    assert sc["horizon_s"] == 60 and sc["fleet"]["islands"] == 2  # the sweep's overrides applied
    assert sc["engine"]["max_num_seqs"] == 256 and "load" in sc["workload"]  # every default filled in
    assert "policy" not in sc  # a sweep's policies are its own, listed below
    pol = {p["label"]: p for p in first["policies"]}
    assert pol["fixed"]["params"]["H"] == 24 and pol["no_sync"]["role"] == "baseline"
    assert pol["matched_random[fixed]"]["reference"] == "fixed"
    assert first["sessions"] == [{**provenance.software(), "resume": False, "completed_before": 0}]
    assert "invocation 1: wadiloco-sim" in (out / "report.md").read_text()

    # a session killed before its last run, resumed under another version
    con = sqlite3.connect(out / "runs.sqlite")
    with con:
        con.execute("DELETE FROM runs WHERE policy_label = 'fixed'")
    con.close()
    other = {"version": "9.9.9-test", "git_revision": None}
    monkeypatch.setattr(provenance, "software", lambda: other)
    assert main([*argv, "--resume"]) == 0
    again = json.loads((out / "provenance.json").read_text())
    assert again["sessions"] == [*first["sessions"], {**other, "resume": True, "completed_before": 2}]
    assert {k: v for k, v in again.items() if k != "sessions"} == {k: v for k, v in first.items() if k != "sessions"}
    md = (out / "report.md").read_text()
    assert "invocation 2 (--resume): wadiloco-sim 9.9.9-test, git not a git checkout, 2 runs stored before" in md
