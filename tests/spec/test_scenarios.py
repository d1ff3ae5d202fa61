"""Scenario files load, bad ones fail with a message naming the file and field, and the CLI
turns that into exit 2 with no traceback and no output files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from shipped import load_shipped

from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import load_scenario, with_overrides

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
REGIMES = {
    "normal",
    "pressure_heavy",
    "sustained_sync_heavy",
    "bursty",
    "aperiodic",
    "azure_conv",
    "mooncake_synthetic",
}


def test_every_regime_has_a_scenario():
    assert {p.stem for p in SCENARIOS} >= REGIMES


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_loads(path):
    sc = load_shipped(path)
    assert sc.name == path.stem
    # the digest (runs.csv's scenario_hash) is stable across loads and moves with any field
    assert load_scenario(path).digest() == sc.digest()
    assert with_overrides(sc, {"horizon_s": sc.horizon_s + 1}).digest() != sc.digest()


BASE = {"name": "x", "workload": {"kind": "normal"}, "policy": {"name": "fixed", "params": {"H": 256}}}

BAD = [
    # (patch applied to BASE, field the message must name)
    ({"horizon_s": -5}, "horizon_s"),
    ({"horizon_s": 0}, "horizon_s"),
    ({"horizon_s": "long"}, "horizon_s"),
    ({"horizon_s": float("nan")}, "horizon_s"),
    ({"horizon_s": float("inf")}, "horizon_s"),
    ({"typo_field": 1}, "typo_field"),
    ({"fleet": {"islands": 0}}, "fleet.islands"),
    ({"fleet": {"islandz": 2}}, "fleet.islandz"),
    ({"fleet": {"colocation": "same_rack"}}, "fleet.colocation"),
    ({"fleet": {"unlimited": ["cpu"]}}, "fleet.unlimited"),
    ({"fleet": {"nic_gbps": 0}}, "fleet.nic_gbps"),
    ({"fleet": {"wan_efficiency": 1.5}}, "fleet.wan_efficiency"),
    ({"engine": {"max_num_seqs": 0}}, "engine.max_num_seqs"),
    ({"slo": {"ttft_s": 0}}, "slo.ttft_s"),
    ({"slo": {"tpot_s": -1}}, "slo.tpot_s"),
    ({"merge": {"h_min": 600, "h_max": 512}}, "merge"),
    ({"merge": {"checkpoint_gbps": -1}}, "merge.checkpoint_gbps"),
    ({"training": {"step_time_s": 0}}, "training.step_time_s"),
    ({"workload": {"kind": "nope"}}, "workload.kind"),
    ({"workload": {"kind": "normal", "load": -0.5}}, "workload.load"),
    ({"workload": {"kind": "normal", "lod": 0.5}}, "workload.lod"),
    ({"workload": {"kind": "trace", "path": "missing.csv"}}, "workload.path"),
    ({"policy": {"name": "smartest"}}, "policy.name"),
    ({"policy": {"name": "fixed", "params": {"H": -3}}}, "policy.params.H"),
    ({"policy": {"name": "fixed", "params": {"h": 3}}}, "policy.params.h"),
    ({"monitor": {"sample_s": 0}}, "monitor.sample_s"),
    ({"fleet": {"wan_efficiency": "fast"}}, "fleet.wan_efficiency"),  # a number in (0, 1] or auto
    ({"merge": {"allreduce_calls": 0}}, "merge.allreduce_calls"),
    ({"merge": {"ring_step_latency_s": -1e-4}}, "merge.ring_step_latency_s"),
]


def _write(tmp_path, doc) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return p


def _merge(base, patch):
    out = dict(base)
    for k, v in patch.items():
        out[k] = v
    return out


@pytest.mark.parametrize("patch,field", BAD, ids=[f for _, f in BAD])
def test_bad_scenario_names_file_and_field(tmp_path, patch, field):
    p = _write(tmp_path, _merge(BASE, patch))
    with pytest.raises(InputError) as ei:
        load_scenario(p)
    msg = str(ei.value)
    assert str(p) in msg and field in msg, msg


@pytest.mark.parametrize(
    "text,where",
    [
        ("name: [unclosed\n", "line"),
        ("- just\n- a list\n", "top level"),
        ("", "top level"),
        ("name: x\nname: y\n\tbad: tab\n", "line"),
    ],
)
def test_malformed_yaml(tmp_path, text, where):
    p = _write(tmp_path, text)
    with pytest.raises(InputError) as ei:
        load_scenario(p)
    assert str(p) in str(ei.value) and where in str(ei.value)


def test_missing_file():
    with pytest.raises(InputError, match="file not found"):
        load_scenario("/nonexistent/scenario.yaml")


def test_overrides_revalidate():
    sc = load_scenario(ROOT / "scenarios" / "normal.yaml")
    assert with_overrides(sc, {"fleet.interisland_gbps": 10}).fleet.interisland_gbps == 10
    with pytest.raises(InputError, match="fleet.interisland_gbps"):
        with_overrides(sc, {"fleet.interisland_gbps": -1})
    with pytest.raises(InputError, match="no such field"):
        with_overrides(sc, {"fleet.nope": 1})


def _subprocess_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "wadiloco.experiments.cli", *args], capture_output=True, text=True, timeout=120
    )


def _cli(capsys, *args) -> tuple[int, str]:
    """The CLI's main() in this process (what the console script calls), its exit code and stderr. A
    subprocess costs a second of imports; test_cli_in_a_real_process covers the process boundary."""
    from wadiloco.experiments.cli import main

    try:
        rc = main(list(args))
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("patch,field", BAD[:6] + BAD[14:16] + BAD[21:23], ids=lambda x: str(x)[:20])
def test_cli_bad_scenario_exit_2_no_traceback_no_output(tmp_path, capsys, patch, field):
    p = _write(tmp_path, _merge(BASE, patch))
    out = tmp_path / "out"
    rc, err = _cli(capsys, "run", str(p), "--out", str(out))
    assert rc == 2, err
    assert "Traceback" not in err and field in err and str(p) in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())


def test_cli_unknown_policy_and_bad_param(capsys):
    sc = ROOT / "scenarios" / "normal.yaml"
    rc, err = _cli(capsys, "run", str(sc), "--policy", "bogus")
    assert rc == 2 and "unknown policy" in err and "Traceback" not in err
    rc, err = _cli(capsys, "run", str(sc), "--policy", "offline_calibrated")  # an old name says its new one
    assert rc == 2 and "unknown policy 'offline_calibrated' (renamed 'overlap_oracle')" in err
    rc, err = _cli(capsys, "run", str(sc), "--policy", "fixed", "--param", "H=zero")
    assert rc == 2 and "H" in err and "Traceback" not in err
    rc, err = _cli(capsys, "run", str(sc), "--seed", "x")
    assert rc == 2 and "Traceback" not in err


def test_cli_in_a_real_process(tmp_path):
    """The same checks across a real process boundary: exit status 2, one line, no traceback, no output."""
    patch, field = BAD[0]
    p = _write(tmp_path, _merge(BASE, patch))
    out = tmp_path / "out"
    r = _subprocess_cli("run", str(p), "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and field in r.stderr and str(p) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())
    r = _subprocess_cli("run", str(ROOT / "scenarios" / "normal.yaml"), "--policy", "bogus")
    assert r.returncode == 2 and "unknown policy" in r.stderr and "Traceback" not in r.stderr


def _count_calls(monkeypatch, module, name: str) -> list:
    """Record every call of `module.name`, also where a wadiloco module imported it by name."""
    orig, calls = getattr(module, name), []

    def counted(*args, **kw):
        calls.append(args)
        return orig(*args, **kw)

    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("wadiloco") and getattr(mod, name, None) is orig:
            monkeypatch.setattr(mod, name, counted)
    return calls


def test_loading_a_scenario_fits_no_profile(monkeypatch):
    """Validation looks an engine profile's model and co-tenant entry up by name and fits nothing;
    the run's resolution fits it (once per file content: models.engine.profiles)."""
    from wadiloco.models.engine import profiles
    from wadiloco.models.spec import resolve as R

    def fitted(*_a, **_k):
        raise AssertionError("fitted")

    for where in (profiles, R):
        monkeypatch.setattr(where, "load_profile", fitted)
    monkeypatch.setattr(profiles, "fit_profile", fitted)
    sc = load_scenario(ROOT / "scenarios" / "testbed" / "stage11_sync.yaml")  # engine.model, cotenant.profile_entry
    assert sc.engine.model is not None and sc.cotenant.profile_entry is not None
    with pytest.raises(AssertionError, match="fitted"):
        R.resolve(sc)


def test_a_run_resolves_its_scenario_once(tmp_path, monkeypatch):
    """`wadiloco run` of a trace replay reads the trace once and validates the workload and the
    policy once; summary.json says what ran. Re-validating the scenario (as sweeps and capacity
    searches do) re-reads the trace only once the file has changed."""
    from wadiloco.experiments.cli import main
    from wadiloco.models.policies import registry
    from wadiloco.models.policies.pressure_gated import PressureGatedParams
    from wadiloco.models.workload import kinds as workloads
    from wadiloco.models.workload import traces

    rows = [f"2023-11-16 18:15:{s:02d}.0000000,{300 + 7 * s},{20 + s}" for s in range(40)]
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    doc = {
        **BASE,
        "horizon_s": 30,
        "drain_s": 5,
        "merge": {"h_min": 16, "h_max": 64},
        "workload": {"kind": "trace", "path": "t.csv", "load": 0.3, "loop": True},
        "policy": {"name": "pressure_gated", "params": {"H": 32}},
    }
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc))
    reads = _count_calls(monkeypatch, traces, "_read_text")
    policy_parses = _count_calls(monkeypatch, registry, "parse_policy")
    workload_parses = _count_calls(monkeypatch, workloads, "parse_workload")
    out = tmp_path / "out"
    assert main(["run", str(p), "--out", str(out)]) == 0
    # each policy once: the scenario's, and no_sync for the paired run the sync-excess is measured against
    assert (len(reads), len(workload_parses)) == (1, 1)
    assert sorted(c[0] for c in policy_parses) == ["no_sync", "pressure_gated"]

    summary = json.loads((out / "summary.json").read_text())
    sc = load_scenario(p)
    assert summary["scenario_digest"] == sc.digest()
    assert summary["policy_params"] == {**PressureGatedParams().model_dump(mode="json"), "H": 32}
    assert summary["merges"] >= 1

    with_overrides(sc, {"workload.load": 0.4})
    assert len(reads) == 1  # the same file: the loaded trace is reused
    trace.write_text(trace.read_text() + "2023-11-16 18:16:00.0000000,50,5\n")
    with_overrides(sc, {"workload.load": 0.4})
    assert len(reads) == 2  # the file changed: read again
