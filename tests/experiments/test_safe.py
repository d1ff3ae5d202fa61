"""`wadiloco safe`: the boundary of the safe region where a constructed fleet puts it, the unlimited
resource that removes the interference named, the JSON and files it writes, --resume, and bad flags
refused in one line. The fleet: one sidecar whose requests come at a constant spacing (a D/D/1 queue,
tests/safe_plugins.py, loaded in the sweep's worker processes as a plugin) and whose merges are an
outer step on its GPU at weight 1 for about 20 s: while it runs the sidecar keeps half its GPU, so it
keeps up exactly while the load is at most 0.5 and queues past it. Merges then add no violation at all
up to load 0.5 and tens of points from 0.6 on, and only the GPU's control removes them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from wadiloco.experiments import region as R
from wadiloco.experiments.cli import main

PLUGIN = str(Path(__file__).resolve().parents[1] / "safe_plugins.py")
ROOT = Path(__file__).resolve().parents[2]
FLEET = {
    "name": "periodic",
    "horizon_s": 120,
    "drain_s": 30,
    "fleet": {"islands": 1, "hosts_per_island": 1, "sidecars_per_host": 1, "colocation": "same_gpu"},
    "engine": {"max_num_seqs": 1, "max_num_batched_tokens": 100000, "host_overhead_s": 0.0},
    "slo": {"ttft_s": 0.2, "tpot_s": 1.0},  # service 0.079 s alone, 0.157 s on half a GPU
    "interference": {"gpu_outer_weight": 1.0},
    "merge": {"h_min": 8, "h_max": 64, "phases": ["outer"], "outer_elements_per_s": 1.0e8},
    "workload": {"kind": "test_periodic", "load": 0.3},
    "policy": {"name": "fixed", "params": {"H": 32}},
}
GRID = ["--loads", "0.3,0.4,0.5,0.6,0.7", "--intervals", "32", "--seeds", "2", "--no-progress"]


def _cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own refusals (experiments.cli: one line, exit 2)
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """One safe of the constructed fleet with --out and --json, its worker processes loading the plugin."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WADILOCO_PLUGINS", PLUGIN)
    d = tmp_path_factory.mktemp("safe")
    sc = d / "periodic.yaml"
    sc.write_text(yaml.safe_dump(FLEET))
    out = d / "out"
    try:
        rc = main(["safe", str(sc), *GRID, "--workers", "2", "--out", str(out), "--json"])
    finally:
        mp.undo()
    return rc, sc, out


def test_boundary_where_the_fleet_puts_it(mapped):
    rc, _, out = mapped
    r = json.loads((out / "safe.json").read_text())
    assert rc == 0
    (b,) = r["boundaries"]
    assert b["row"] == "H=32" and b["where"] == R.INSIDE and 0.5 <= b["boundary_load"] < 0.6
    assert b["first_unsafe_load"] == 0.6 and b["band_low"] <= b["boundary_load"] <= b["band_high"]
    cells = pd.DataFrame(r["cells"])
    safe, unsafe = cells[cells["load"] <= 0.5], cells[cells["load"] >= 0.6]
    assert (safe["sync_excess_pp"] == 0).all() and (safe["note"] == "all zero").all()
    assert (unsafe["sync_excess_pp"] > 10).all() and (unsafe["state"] == R.UNSAFE).all()
    assert r["boundary_cell"]["load"] == 0.6 and r["boundary_cell"]["row"] == "H=32"


def test_the_control_that_removes_the_interference_is_named(mapped):
    _, _, out = mapped
    r = json.loads((out / "safe.json").read_text())
    assert r["deciding_resource"]["resource"] == "gpu" and r["deciding_resource"]["verdict"] == "removes it"
    ctl = {c["variant"]: c for c in r["controls"]}
    assert ctl["gpu"]["sync_excess_pp"] == 0 and ctl["gpu"]["effect_pp"] < -10
    for res in ("host", "pcie", "nic", "links", "storage"):  # nothing of the merge queues there
        assert ctl[res]["effect_pp"] == 0 and ctl[res]["verdict"] == "no clear effect"
    mit = {m["variant"] for m in r["mitigations"]}
    assert {"streaming (4 fragments)", "int8 compression", "int4 compression"} <= mit
    assert any(m.startswith("workload-aware placement") for m in mit)
    assert any("async checkpoints" in s and "no checkpoint" in s for s in r["not_run"])


def test_json_and_files(mapped, capsys):
    rc, _, out = mapped
    r = json.loads((out / "safe.json").read_text())
    keys = {"scenario", "policy", "threshold_pp", "seeds", "loads", "rows", "boundaries", "boundary_cell"}
    keys |= {"deciding_resource", "controls", "mitigations", "not_run", "cells", "runs", "provenance"}
    assert keys <= set(r) and r["threshold_pp"] == 0.5 and r["seeds"] == [0, 1]
    assert r["rows"] == {"H=32": {"H": 32}} and r["loads"] == [0.3, 0.4, 0.5, 0.6, 0.7]
    p = r["provenance"]
    assert {"version", "git_revision", "scenario_digest", "seeds", "grid", "threshold_pp", "scenario"} <= set(p)
    assert p["grid"]["loads"] == r["loads"] and len(p["scenario_digest"]) == 16
    assert set(pd.read_csv(out / "cells.csv").columns) == set(R.CELL_COLUMNS)
    assert all(set(c) == set(R.CELL_COLUMNS) for c in r["cells"]) and len(r["cells"]) == 5
    assert r["runs"]["grid"] == 5 * 2 * 2 and r["runs"]["failed"] == 0
    html = (out / "safe.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html  # one self-contained page
    md = (out / "safe.md").read_text()
    assert "![" in md and "safe.png" in md and "H=32: safe up to load 0.50" in md
    assert (out / "safe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_runs_nothing_again_and_gives_the_same_answer(mapped, capsys, monkeypatch):
    rc, sc, out = mapped
    before = json.loads((out / "safe.json").read_text())
    monkeypatch.setenv("WADILOCO_PLUGINS", PLUGIN)
    rc, text, _ = _cli(["safe", str(sc), *GRID, "--out", str(out), "--resume"], capsys)
    after = json.loads((out / "safe.json").read_text())
    assert rc == 0 and after["runs"]["ran"] == 0 and "62 kept from an earlier run" in text
    for k in ("boundaries", "cells", "controls", "mitigations", "deciding_resource"):
        assert after[k] == before[k]
    lines = text.splitlines()
    assert lines[1].startswith("safe region: H=32: safe up to load 0.50") and lines[3].startswith(
        "deciding resource: gpu"
    )


@pytest.mark.parametrize(
    "flags, field, words",
    [
        (["--threshold", "-1"], "--threshold", ">= 0"),
        (["--threshold", "nan"], "--threshold", "finite"),
        (["--loads", "0.3,abc"], "--loads", "positive numbers"),
        (["--loads", "0,0.5"], "--loads", "positive numbers"),
        (["--loads", "500"], "--loads", "workload.load"),
        (["--intervals", "1000"], "--intervals", "H=1000"),
        (["--intervals", "12.5"], "--intervals", "whole number"),
        (["--policy", "no_sync"], "--policy", "never merges"),
        (["--policy", "wa_diloco", "--intervals", "32"], "--intervals", "places merges itself"),
        (["--resume", "--force"], "--force", "give one"),
        (["--seeds", "0"], "", "must be between 1 and 4096"),
        (["--horizon", "-5"], "--horizon", "> 0"),
    ],
)
def test_bad_flags_exit_2_in_one_line(flags, field, words, capsys, tmp_path):
    rc, out, err = _cli(["safe", str(ROOT / "scenarios" / "bursty.yaml"), *flags, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert field in err and words in err, err
    assert not (tmp_path / "o").exists()
    rc, out, err = _cli(["safe", str(ROOT / "scenarios" / "bursty.yaml"), "--resume"], capsys)
    assert rc == 2 and "--resume" in err and "give its folder" in err


def test_a_workload_without_load_is_refused(capsys, tmp_path):
    sc = tmp_path / "closed.yaml"
    sc.write_text(yaml.safe_dump({"name": "c", "workload": {"kind": "closed_loop"}}))
    rc, out, err = _cli(["safe", str(sc)], capsys)
    assert rc == 2 and "workload.kind" in err and "no `load`" in err and len(err.strip().splitlines()) == 1


# ---- the region's arithmetic --------------------------------------------------------------------------


def test_crossing_interpolates_between_grid_loads():
    assert R.crossing([0.2, 0.4, 0.6], [0.0, 0.2, 1.0], 0.5) == (pytest.approx(0.475), R.INSIDE)
    assert R.crossing([0.2, 0.4], [0.8, 1.0], 0.5) == (0.2, R.BELOW)
    at, where = R.crossing([0.2, 0.4], [0.1, 0.5], 0.5)  # at the threshold is still safe
    assert math.isnan(at) and where == R.BEYOND
    # a cell without a value before the crossing: the crossing is put at that cell's load (the earlier end)
    assert R.crossing([0.2, 0.4, 0.6], [0.0, math.nan, 1.0], 0.5)[0] == pytest.approx(0.4)


def test_boundaries_bands_and_ground_past_them():
    grid = pd.DataFrame(
        {
            "load": [0.2, 0.4, 0.6, 0.8] * 2,
            "row": ["a"] * 4 + ["b"] * 4,
            "sync_excess_pp": [0.0, 0.4, 0.9, 0.1, 0.0, 0.1, 0.2, 0.3],
            "ci_low_pp": [math.nan, 0.2, 0.6, 0.0, math.nan, 0.0, 0.1, 0.2],
            "ci_high_pp": [math.nan, 0.6, 1.2, 0.2, math.nan, 0.2, 0.3, 0.6],
        }
    )
    b = R.boundaries(grid, 0.5).set_index("row")
    assert b.loc["a", "where"] == R.INSIDE and b.loc["a", "boundary_load"] == pytest.approx(0.44)
    assert b.loc["a", "band_low"] < b.loc["a", "boundary_load"] < b.loc["a", "band_high"]
    assert b.loc["a", "first_unsafe_load"] == 0.6 and b.loc["a", "safe_again"] == [0.8]
    assert b.loc["b", "where"] == R.BEYOND and b.loc["b", "band_low"] == pytest.approx(0.6 + 0.2 * 2 / 3)
    cell = R.boundary_cell(grid.assign(state=""), R.boundaries(grid, 0.5))
    assert (cell["load"], cell["row"]) == (0.6, "a")


def test_deciding_is_the_control_that_removes_the_most():
    rows = [
        ["gpu", 0.8, 0.6, 1.0, "", 0.0, math.nan, math.nan, "all zero", R.UNSAFE],
        ["host", 0.0, math.nan, math.nan, "all zero", -0.8, -1.0, -0.6, "", R.SAFE],
        ["storage", 0.1, 0.0, 0.2, "", -0.7, -0.9, -0.5, "", R.SAFE],
    ]
    cols = ["variant", "sync_excess_pp", "ci_low_pp", "ci_high_pp", "note", "effect_pp", "effect_low_pp"]
    ctl = pd.DataFrame(rows, columns=[*cols, "effect_high_pp", "effect_note", "state"])
    d = R.deciding(ctl, 0.8, 0.5)
    assert d == {"resource": "host", "verdict": "removes it", "also": ["storage"]}
    assert R.deciding(ctl[ctl["variant"] == "gpu"], 0.8, 0.5) is None
    assert R.state(R.CI(0.4, 0.3, 0.6, 4), 0.5) == R.UNCERTAIN and R.state(R.CI(0.0, np.nan, np.nan, 4), 0.5) == R.SAFE


@pytest.mark.slow
def test_dask_gives_the_same_map(mapped, tmp_path, monkeypatch):
    """The same map on a Dask cluster (its workers load the plugin too): the same cells, boundary and
    controls, to the bit."""
    pytest.importorskip("distributed")
    _, sc, out = mapped
    monkeypatch.setenv("WADILOCO_PLUGINS", PLUGIN)
    d = tmp_path / "dask"
    assert main(["safe", str(sc), *GRID, "--backend", "dask", "--workers", "2", "--out", str(d)]) == 0
    a, b = (json.loads((x / "safe.json").read_text()) for x in (out, d))
    assert b["runs"]["backend"] == "dask"
    for k in ("cells", "boundaries", "boundary_cell", "controls", "mitigations", "deciding_resource"):
        assert a[k] == b[k], k
