"""Sweeps end to end: schema errors, the store, resume after SIGKILL, failing runs, local vs Dask.

The sweeps here are `experiments/smoke.yaml` shrunk to 60 s horizons on a 2-host fleet (about
0.1 s per run), plus two test-only policies from tests/sweep_plugins.py, which reach spawned and
Dask workers through $WADILOCO_PLUGINS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from sweep_helpers import (
    ROOT,
    plugins_env,  # noqa: F401 (an autouse fixture: imported to take effect)
    run_until_killed,
    store_rows,
    tiny_sweep_dict,
    total_runs,
    write_sweep,
)

from wadiloco.experiments.cli import main
from wadiloco.models.errors import InputError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The uninterrupted reference sweep, run end to end through the CLI on 2 local workers."""
    root = tmp_path_factory.mktemp("tiny")
    sweep = write_sweep(root / "tiny.yaml", tiny_sweep_dict())
    out = root / "out"
    rc = main(["sweep", str(sweep), "--out", str(out), "--workers", "2", "--no-progress"])
    assert rc == 0
    return {"sweep": sweep, "out": out, "root": root}


# ---- schema ---------------------------------------------------------------------------------

BAD = [
    ("missing scenario", lambda d: d["regimes"].append("no/such/scenario.yaml"), "regimes.2.path"),
    ("unknown policy", lambda d: d["policies"].append({"name": "no_such_policy"}), "policies.6.name"),
    (
        "matched_random without reference",
        lambda d: d["policies"].append({"name": "matched_random", "draws": 2}),
        "policies.6.references",
    ),
    (
        "reference to an unknown label",
        lambda d: d["policies"].append({"name": "matched_random", "references": ["nope"]}),
        "policies.6.references.0",
    ),
    (
        "reference in params",
        lambda d: d["policies"].append(
            {"name": "matched_random", "params": {"reference": "fixed"}, "references": ["fixed"]}
        ),
        "policies.6.params.reference",
    ),
    (
        "references on a plain policy",
        lambda d: d["policies"].append({"name": "fixed", "label": "f2", "references": ["fixed"]}),
        "policies.6.references",
    ),
    (
        "bad policy param",
        lambda d: d["policies"].append({"name": "fixed", "label": "f2", "params": {"H": -3}}),
        "policies.6.params.H",
    ),
    ("unknown key", lambda d: d.update(sedes=3), "sedes"),
    ("unknown key in bootstrap", lambda d: d["bootstrap"].update(n_resample=10), "bootstrap.n_resample"),
    ("no no_sync", lambda d: d.update(policies=[p for p in d["policies"] if p["name"] != "no_sync"]), "policies"),
    (
        "duplicate label",
        lambda d: d["policies"].append({"name": "fixed", "params": {"H": 40}, "label": "wa_diloco"}),
        "policies.6.label",
    ),
    ("zero seeds", lambda d: d.update(seeds=0), "seeds"),
    ("repeated seeds", lambda d: d.update(seeds=[1, 1]), "seeds"),
    ("timeline seed not a seed", lambda d: d.update(timeline_seed=7), "timeline_seed"),
    ("override of a missing field", lambda d: d["overrides"].update({"fleet.nope": 1}), "overrides.fleet.nope"),
    ("override breaks the corridor", lambda d: d["overrides"].update({"merge.h_min": 100}), "overrides"),
    (
        "regime override of a bad value",
        lambda d: d["regimes"].__setitem__(1, {"path": d["regimes"][1], "overrides": {"fleet.islands": 0}}),
        "regimes.1.overrides.fleet.islands",
    ),
    (
        "policy param outside a regime's corridor",
        lambda d: d["policies"].append({"name": "fixed", "label": "f2", "params": {"H": 400}}),
        "policies.6.params",
    ),
    ("bad confidence", lambda d: d["bootstrap"].update(confidence=1.5), "bootstrap.confidence"),
    ("bad method", lambda d: d["bootstrap"].update(method="studentized"), "bootstrap.method"),
    ("nan horizon", lambda d: d.update(horizon_s=float("nan")), "horizon_s"),
    (
        "policy in an unknown regime",
        lambda d: d["policies"].append({"name": "fixed", "label": "f2", "params": {"H": 40}, "regimes": ["nowhere"]}),
        "policies.6.regimes.0",
    ),
    ("regime without path", lambda d: d["regimes"].append({"name": "x"}), "regimes.2.path"),
]


@pytest.mark.parametrize("case,mutate,field", BAD, ids=[b[0] for b in BAD])
def test_bad_sweep_files_name_file_and_field(tmp_path, case, mutate, field):
    from wadiloco.experiments.sweep import load_sweep

    d = tiny_sweep_dict()
    mutate(d)
    p = write_sweep(tmp_path / "bad.yaml", d)
    with pytest.raises(InputError) as ei:
        load_sweep(p)
    assert ei.value.file == str(p)
    assert ei.value.where.startswith(field), (ei.value.where, str(ei.value))


def test_bad_sweep_via_cli_exits_2_without_traceback(tmp_path, capsys):
    d = tiny_sweep_dict()
    d["policies"].append({"name": "matched_random", "draws": 3})
    p = write_sweep(tmp_path / "bad.yaml", d)
    rc = main(["sweep", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err and "bad.yaml" in err and "references" in err
    assert not (tmp_path / "out" / "runs.sqlite").exists()


def test_yaml_syntax_error(tmp_path):
    from wadiloco.experiments.sweep import load_sweep

    p = tmp_path / "s.yaml"
    p.write_text("regimes: [a\npolicies: {")
    with pytest.raises(InputError, match="line"):
        load_sweep(p)


def test_shipped_smoke_yaml_plan():
    from wadiloco.experiments.sweep import load_sweep

    plan = load_sweep(ROOT / "experiments" / "smoke.yaml")
    assert len(plan.regimes) == 2 and len(plan.seeds) == 3
    assert [a.role for a in plan.arms].count("baseline") == 1
    ctrl = [a for a in plan.arms if a.role == "control"]
    assert ctrl and all(a.name == "matched_random" and a.draws == 3 for a in ctrl)
    assert len({a.name for a in plan.arms}) == 4
    tasks = plan.tasks()
    assert len({t.key for t in tasks}) == len(tasks)
    assert all(t.ref_key in {u.key for u in tasks} for t in tasks if t.ref_key)


def test_labels_and_budget_pairing(tmp_path):
    from wadiloco.experiments.sweep import load_sweep

    d = tiny_sweep_dict()
    d["policies"] = [
        {"name": "no_sync"},
        {"name": "fixed", "params": {"H": 24}},
        {"name": "fixed", "params": {"H": 40}},
        {"name": "matched_random", "references": ["fixed[H=24]", "fixed[H=40]"], "draws": 2},
    ]
    plan = load_sweep(write_sweep(tmp_path / "s.yaml", d))
    assert [a.label for a in plan.arms] == [
        "no_sync",
        "fixed[H=24]",
        "fixed[H=40]",
        "matched_random[fixed[H=24]]",
        "matched_random[fixed[H=40]]",
    ]
    assert plan.arm("matched_random[fixed[H=40]]").params["reference_params"] == {"H": 40}
    # an entry restricted to some regimes runs only there, and so does a control following it
    d["policies"][2]["regimes"] = ["bursty"]
    plan = load_sweep(write_sweep(tmp_path / "s2.yaml", d))
    by = {(t.regime, t.arm) for t in plan.tasks()}
    assert ("normal", "fixed[H=40]") not in by and ("bursty", "fixed[H=40]") in by
    assert ("normal", "matched_random[fixed[H=40]]") not in by and ("normal", "matched_random[fixed[H=24]]") in by
    assert len(plan.tasks()) == 3 * (2 * (1 + 1 + 2) + (1 + 2))


# ---- end to end -----------------------------------------------------------------------------

INT_COLS = ["seed", "draw", "requests", "completed", "slo_violations", "merges", "inner_steps"]
FLOAT_COLS = ["slo_violation_rate", "sync_excess", "ttft_p95_s", "e2e_p95_s", "final_loss"]


def test_tiny_sweep_outputs(tiny):
    out = tiny["out"]
    total = total_runs(tiny["sweep"])
    runs = pd.read_csv(out / "runs.csv")
    assert runs.shape[0] == total == 2 * 3 * 8
    for c in [
        "regime",
        "policy",
        "seed",
        "draw",
        "requests",
        "slo_violation_rate",
        "sync_excess",
        "merges",
        "ttft_p95_s",
        "e2e_p95_s",
    ]:
        assert c in runs.columns
    for c in INT_COLS:
        assert runs[c].dtype == "int64", c
    for c in FLOAT_COLS:
        assert runs[c].dtype == "float64", c
    assert not any("wall" in c for c in runs.columns)
    assert (runs["status"] == "ok").all()
    assert not runs.duplicated(["regime", "policy", "seed", "draw"]).any()
    # sync-excess is paired with no_sync on the same seed; no_sync's own is exactly 0
    assert (runs.loc[runs["policy"] == "no_sync", "sync_excess"] == 0).all()
    # common random numbers: one arrivals hash per (regime, seed), different across seeds
    h = runs.groupby(["regime", "seed"])["arrivals_hash"].nunique()
    assert (h == 1).all()
    assert runs.groupby("regime")["arrivals_hash"].nunique().eq(3).all()
    # matched controls inherit their reference's merge count
    ref = runs[runs["policy"] == "wa_diloco"].set_index(["regime", "seed"])["merges"]
    mr = runs[runs["policy"] == "matched_random[wa_diloco]"]
    assert (mr["reference_merges"].to_numpy() == ref.loc[list(zip(mr["regime"], mr["seed"]))].to_numpy()).all()

    summ = pd.read_csv(out / "summary.csv")
    assert summ.shape[0] == 2 * 6
    for c in [
        "regime",
        "policy",
        "n_seeds",
        "sync_excess_mean",
        "sync_excess_ci_low",
        "sync_excess_ci_high",
        "p95_ratio",
        "p95_ratio_ci_low",
        "p95_ratio_ci_high",
        "mr_envelope_low",
        "mr_envelope_high",
        "p_placement",
        "p_placement_holm",
        "p_wilcoxon",
        "holm_family",
        "verdict",
    ]:
        assert c in summ.columns
    assert summ["n_seeds"].dtype == "int64" and (summ["n_seeds"] == 3).all()
    for c in ["sync_excess_mean", "sync_excess_ci_low", "sync_excess_ci_high", "p95_ratio"]:
        assert summ[c].dtype == "float64"
    assert summ["verdict"].str.match(r"^(demonstrated$|not demonstrated: .+|n/a: .+)").all()
    # an interval where the data vary; where they do not, none, and the note says why
    ci = summ["sync_excess_ci_low"].notna()
    assert (summ.loc[ci, "sync_excess_ci_low"] <= summ.loc[ci, "sync_excess_ci_high"]).all()
    assert summ.loc[~ci, "sync_excess_note"].isin(["all zero", "no variance across seeds"]).all()
    assert (summ.loc[summ["policy"] == "no_sync", "sync_excess_note"] == "all zero").all()
    pol = summ[summ["role"] == "policy"].set_index(["regime", "policy"])
    assert pol.loc[("normal", "wa_diloco"), "matched_control"] == "matched_random[wa_diloco]"
    assert pol["p_placement_holm"].dropna().ge(pol["p_placement"].dropna() - 1e-12).all()
    assert "no matched-random control" in pol.loc[("normal", "fixed"), "verdict"]

    report = (out / "report.md").read_text()
    assert "Load match" in report and "identical arrivals" in report and "MISMATCH" not in report
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    # self-contained: every figure embedded, none linked by a path that breaks when the file moves
    assert page.count("src='data:image/png;base64,") >= 5 and "src='figures/" not in page
    for f in ["sync_excess.png", "envelope.png", "tradeoff.png", "timeline_normal.png", "timeline_bursty.png"]:
        p = out / "figures" / f
        assert p.exists() and p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG", f
        assert f"figures/{f}" in report
    leftovers = [p.name for p in out.rglob(".*") if p.name.startswith((".runs", ".summary", ".report"))]
    assert not leftovers  # atomic writes leave no temp files


def test_report_and_export_rerender_from_store(tiny, tmp_path, capsys):
    out = tiny["out"]
    before = {f: (out / f).read_bytes() for f in ("runs.csv", "summary.csv", "comparisons.csv")}
    assert main(["report", str(out), "--no-figures"]) == 0
    for f, b in before.items():
        assert (out / f).read_bytes() == b, f
    assert main(["export", str(out), "--format", "parquet", "--output", str(tmp_path / "e.parquet")]) == 0
    assert main(["export", str(out), "--format", "csv", "--output", str(tmp_path / "e.csv")]) == 0
    pq = pd.read_parquet(tmp_path / "e.parquet")
    cs = pd.read_csv(tmp_path / "e.csv")
    assert len(pq) == len(cs) == total_runs(tiny["sweep"])
    assert {"regime", "policy", "seed", "draw", "slo_violation_rate", "violations_by_phase.none"} <= set(pq.columns)
    assert not any("wall" in c for c in pq.columns)
    # a second export is byte-identical
    assert main(["export", str(out), "--format", "csv", "--output", str(tmp_path / "e2.csv")]) == 0
    assert (tmp_path / "e.csv").read_bytes() == (tmp_path / "e2.csv").read_bytes()
    assert main(["report", str(tmp_path / "nothing_here")]) == 2


def test_parquet_export_has_struct_and_list_columns(tiny, tmp_path):
    """params is a struct column and merge_steps a list column (not JSON text); CSV keeps JSON."""
    import pyarrow.parquet as pq

    assert main(["export", str(tiny["out"]), "--format", "parquet", "--output", str(tmp_path / "e.parquet")]) == 0
    assert main(["export", str(tiny["out"]), "--format", "csv", "--output", str(tmp_path / "e.csv")]) == 0
    t = pq.read_table(tmp_path / "e.parquet")
    assert str(t.schema.field("params").type).startswith("struct<")
    assert str(t.schema.field("merge_steps").type) == "list<element: int64>"
    rows = t.to_pylist()
    cs = pd.read_csv(tmp_path / "e.csv")

    def present(d):  # a struct has every field of the column: absent ones are null
        d = {k: present(v) if isinstance(v, dict) else v for k, v in (d or {}).items()}
        return {k: v for k, v in d.items() if v not in (None, {})}

    for row, (_, c) in zip(rows, cs.iterrows()):
        assert row["merge_steps"] == json.loads(c["merge_steps"])
        assert present(row["params"]) == present(json.loads(c["params"]))
    fixed = [r for r in rows if r["policy_name"] == "fixed"]
    assert fixed and all(r["params"]["H"] == 24 for r in fixed)


@pytest.mark.parametrize(
    "module, argv, extra",
    [
        ("pyarrow", ["export", "{out}", "--format", "parquet", "--output", "{tmp}/e.parquet"], "[parquet]"),
        ("distributed", ["sweep", "{sweep}", "--out", "{tmp}/d", "--backend", "dask", "--no-progress"], "[dask]"),
    ],
)
def test_missing_extra_is_named(tiny, tmp_path, capsys, monkeypatch, module, argv, extra):
    """Without its optional dependency a feature fails with exit 2 and names the extra to install."""
    monkeypatch.setitem(sys.modules, module, None)  # import of it now fails, as if not installed
    args = [a.format(out=tiny["out"], tmp=tmp_path, sweep=tiny["sweep"]) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert extra in err and f"pip install 'wadiloco-sim{extra}'" in err and "Traceback" not in err
    assert not (tmp_path / "e.parquet").exists() and not (tmp_path / "d" / "runs.csv").exists()


def test_rerun_needs_resume_and_other_sweeps_are_refused(tiny, tmp_path, capsys):
    out = tiny["out"]
    before = (out / "runs.csv").read_bytes()
    assert main(["sweep", str(tiny["sweep"]), "--out", str(out), "--no-progress"]) == 2
    assert "--resume" in capsys.readouterr().err
    # --resume on a complete sweep runs nothing and changes nothing
    assert main(["sweep", str(tiny["sweep"]), "--out", str(out), "--resume", "--no-progress", "--no-figures"]) == 0
    assert "0 run now" in capsys.readouterr().out
    assert (out / "runs.csv").read_bytes() == before
    assert all(r[6] == 1 for r in store_rows(out))
    d = tiny_sweep_dict()
    d["seeds"] = 4
    other = write_sweep(tmp_path / "other.yaml", d)
    for extra in ([], ["--resume"]):
        assert main(["sweep", str(other), "--out", str(out), "--no-progress", *extra]) == 2
        assert "different sweep" in capsys.readouterr().err


def test_dask_backend_gives_identical_runs_csv(tiny, tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "dask"
    rc = main(
        [
            "sweep",
            str(tiny["sweep"]),
            "--out",
            str(out),
            "--workers",
            "2",
            "--backend",
            "dask",
            "--no-progress",
            "--no-figures",
        ]
    )
    assert rc == 0
    assert (out / "runs.csv").read_bytes() == (tiny["out"] / "runs.csv").read_bytes()
    assert (out / "summary.csv").read_bytes() == (tiny["out"] / "summary.csv").read_bytes()


def test_sigkill_then_resume_loses_and_duplicates_nothing(tiny, tmp_path):
    from wadiloco.experiments.report import render
    from wadiloco.experiments.sweep import execute_plan, load_sweep

    out = tmp_path / "killed"
    total = total_runs(tiny["sweep"])
    run_until_killed(tiny["sweep"], out, f"rows={total // 3}", "--workers", "2")  # with runs in flight
    rows = store_rows(out)
    done = {r[:5] for r in rows if r[5] == "ok"}
    assert len(rows) == len(done) == total // 3
    # resume on 1 worker: the result must not depend on the worker count either
    oc = execute_plan(load_sweep(tiny["sweep"]), out, workers=1, resume=True, progress=False)
    assert oc.skipped == len(done) and oc.errors == 0 and oc.ran == total - len(done)
    render(out, figures=False)
    rows = store_rows(out)
    assert len(rows) == total and all(r[5] == "ok" for r in rows)
    assert all(r[6] == 1 for r in rows), "a completed run was run and written again"
    assert (out / "runs.csv").read_bytes() == (tiny["out"] / "runs.csv").read_bytes()
    assert (out / "summary.csv").read_bytes() == (tiny["out"] / "summary.csv").read_bytes()


def test_failing_run_is_recorded_and_retried_on_resume(tiny, tmp_path, monkeypatch, capsys):
    out = tmp_path / "failing"
    monkeypatch.setenv("WADILOCO_TEST_FAIL_SEEDS", "1")
    rc = main(["sweep", str(tiny["sweep"]), "--out", str(out), "--workers", "2", "--no-progress", "--no-figures"])
    assert rc == 1
    assert "--resume" in capsys.readouterr().err
    runs = pd.read_csv(out / "runs.csv", keep_default_na=False)
    bad = runs[runs["status"] == "error"]
    assert set(zip(bad["policy"], bad["seed"])) == {("test_probe", 1), ("test_matched[test_probe]", 1)}
    assert len(bad) == 4  # both regimes
    probe = bad[bad["policy"] == "test_probe"]
    assert probe["error"].str.contains("injected failure on seed 1").all()
    assert bad.loc[bad["policy"] != "test_probe", "error"].str.contains("reference run").all()
    assert (runs["status"] == "ok").sum() == len(runs) - 4  # the others went on
    summ = pd.read_csv(out / "summary.csv")
    v = summ.set_index(["regime", "policy"]).loc[("normal", "test_probe"), "verdict"]
    assert "incomplete" in v
    monkeypatch.delenv("WADILOCO_TEST_FAIL_SEEDS")
    assert (
        main(
            [
                "sweep",
                str(tiny["sweep"]),
                "--out",
                str(out),
                "--workers",
                "2",
                "--resume",
                "--no-progress",
                "--no-figures",
            ]
        )
        == 0
    )
    rows = store_rows(out)
    assert all(r[5] == "ok" for r in rows)
    assert sorted(r[6] for r in rows).count(2) == 4  # exactly the failed runs were run again
    assert (out / "runs.csv").read_bytes() == (tiny["out"] / "runs.csv").read_bytes()


def test_concurrent_sweep_on_same_folder_is_refused(tiny, tmp_path):
    import fcntl

    from wadiloco.experiments.sweep.folder import LOCK_NAME

    out = tmp_path / "locked"
    out.mkdir()
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert main(["sweep", str(tiny["sweep"]), "--out", str(out), "--no-progress"]) == 2
    finally:
        os.close(fd)


# ---- plugins load for every command ----------------------------------------------------------


def _short_scenario(tmp_path) -> str:
    d = yaml.safe_load((ROOT / "scenarios" / "normal.yaml").read_text())
    d.update(horizon_s=30, drain_s=10, fleet={"islands": 2, "hosts_per_island": 1}, merge={"h_min": 16, "h_max": 48})
    d["policy"] = {"name": "no_sync", "params": {}}  # the command line names the policy
    p = tmp_path / "short.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


def _wadiloco(*args, plugins: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WADILOCO_PLUGINS": plugins}
    cmd = [sys.executable, "-m", "wadiloco.experiments.cli", *args]
    return subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=300)


def test_plugins_load_for_every_command(tmp_path):
    """`wadiloco run --policy <a plugin's policy>` (not only `sweep`) knows the plugin's policies."""
    sc = _short_scenario(tmp_path)
    res = _wadiloco("run", sc, "--policy", "test_probe", "--param", "H=32", "--json", plugins="tests/sweep_plugins.py")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["policy"] == "test_probe" and summary["merges"] > 0
    # the same command without the plugin: the policy is unknown (exit 2, no traceback)
    res = _wadiloco("run", sc, "--policy", "test_probe", "--param", "H=32", plugins="")
    assert res.returncode == 2 and "unknown policy 'test_probe'" in res.stderr and "Traceback" not in res.stderr
    pols = _wadiloco("policies", "--json", plugins="tests/sweep_plugins.py")
    assert pols.returncode == 0 and "test_matched" in {p["name"] for p in json.loads(pols.stdout)}


@pytest.mark.parametrize("plugin", ["broken.py", "no_such_plugin_module", "missing.py"])
def test_plugin_that_fails_to_import_is_an_input_error(tmp_path, plugin):
    (tmp_path / "broken.py").write_text("raise RuntimeError('plugin exploded')\n")
    path = str(tmp_path / plugin) if plugin.endswith(".py") else plugin
    res = _wadiloco("policies", plugins=path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.strip().count("\n") == 0, res.stderr
    assert res.stderr.startswith("error: $WADILOCO_PLUGINS: ") and path in res.stderr, res.stderr
    assert "cannot import plugin" in res.stderr
