"""What a newcomer meets on the command line: `--set` overrides checked like the YAML,
`wadiloco show`, provenance in outputs, `--version`, help that shows defaults, units in human
output, and capacity answers that say when they rest on too few merges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from wadiloco.experiments.cli import main
from wadiloco.experiments.overrides import apply_sets, load_with_sets, parse_sets
from wadiloco.models.spec.load import load_scenario

ROOT = Path(__file__).resolve().parents[2]
BURSTY = str(ROOT / "scenarios" / "bursty.yaml")


def _cli(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_set_changes_fields_like_the_yaml(tmp_path):
    """An override equals the same value written into the file, also for a block the file omits."""
    r = load_with_sets(BURSTY, parse_sets(["horizon_s=300", "fleet.colocation=same_gpu", "engine.cuda_graphs=false"]))
    data = yaml.safe_load(Path(BURSTY).read_text())
    assert "fleet" not in data and "engine" not in data  # the overrides create these blocks
    data["horizon_s"] = 300
    data.setdefault("fleet", {})["colocation"] = "same_gpu"
    data.setdefault("engine", {})["cuda_graphs"] = False
    f = tmp_path / "bursty.yaml"
    f.write_text(yaml.safe_dump(data))
    assert r.model_dump() == load_scenario(f).model_dump()
    assert r.digest() != load_scenario(BURSTY).digest()
    assert apply_sets({"a": 1}, [("b.c", 2)]) == {"a": 1, "b": {"c": 2}}


@pytest.mark.parametrize(
    "item, field, words",
    [
        ("fleet.colocaton=same_gpu", "--set fleet.colocaton", "unknown field"),
        ("fleet.colocation=bogus", "--set fleet.colocation", "same_host"),
        ("horizon_s=-3", "--set horizon_s", "greater than 0"),
        ("merge.h_min=600", "--set merge", "h_min (600) must not exceed h_max"),
        ("horizon_s", "--set", "expected PATH=VALUE"),
        ("horizon_s.x=1", "--set horizon_s.x", "horizon_s is a value, not a block"),
        ("fleet..islands=2", "--set fleet..islands", "empty part"),
    ],
)
def test_set_errors_name_the_flag_and_field(item, field, words, capsys, tmp_path):
    for argv in (["show", BURSTY], ["run", BURSTY, "--out", str(tmp_path / "o")]):
        rc, out, err = _cli([*argv, "--set", item], capsys)
        assert rc == 2 and out == "" and "Traceback" not in err
        assert f"<command line>: {field}:" in err and words in err, err
    assert not (tmp_path / "o").exists()


def test_an_error_in_the_file_still_names_the_file(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("horizon_s: -1\n")
    rc, _, err = _cli(["show", str(f), "--set", "horizon_s=50", "--set", "drain_s=5"], capsys)
    assert rc == 0  # the override fixes the field
    rc, _, err = _cli(["show", str(f), "--set", "drain_s=5"], capsys)
    assert rc == 2 and f"{f}: horizon_s:" in err and "--set" not in err


def test_show_prints_every_default_and_the_drain(capsys):
    rc, out, _ = _cli(["show", BURSTY, "--set", "horizon_s=300", "--policy", "fixed", "--param", "H=200"], capsys)
    assert rc == 0
    assert "a run simulates 420 s" in out and "drain_s = 120 s" in out
    data = yaml.safe_load(out)
    assert data["horizon_s"] == 300 and data["policy"] == {"name": "fixed", "params": {"H": 200}}
    assert data["engine"]["max_num_seqs"] == 256  # a default the file does not spell out
    assert data["workload"]["tokens"]["prompt"]["mean"] > 0  # the workload kind's defaults too
    rc, out, _ = _cli(["show", BURSTY, "--json"], capsys)
    assert json.loads(out)["fleet"]["islands"] == 4


def test_run_records_provenance_and_names_units(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["run", BURSTY, "--set", "horizon_s=30", "--set", "drain_s=10", "--param", "H=200", "--seed", "3"]
    rc, text, _ = _cli([*argv, "--out", str(out)], capsys)
    assert rc == 0
    prov = json.loads((out / "summary.json").read_text())["provenance"]
    assert prov["seed"] == 3 and prov["draw"] == 0 and prov["policy"] == "fixed"
    assert prov["policy_params"]["H"] == 200 and prov["overrides"] == {"horizon_s": 30, "drain_s": 10}
    assert prov["scenario"]["horizon_s"] == 30 and prov["scenario"]["engine"]["max_num_seqs"] == 256
    assert prov["version"] and prov["scenario_file"] == BURSTY
    assert prov["git_revision"] is None or len(prov["git_revision"].split("+")[0]) == 40
    assert "30 s of arrivals + 10 s drain = 40 s simulated" in text
    assert "TPOT p50/p95" in text and " ms" in text
    assert "warning: no merge in this run" in text  # 30 s is 60 inner steps, H=200


def test_version_and_help_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("wadiloco ")
    with pytest.raises(SystemExit):
        main(["capacity", "--help"])
    h = capsys.readouterr().out
    assert "(default: 0.9)" in h and "(default: 5)" in h and "(default: 0.01)" in h
    assert "the number of cores" in h and "(default: None)" not in h and "(default: False)" not in h
    with pytest.raises(SystemExit):
        main(["--help"])
    desc = capsys.readouterr().out
    assert "describes each command." in desc


def test_trace_text_has_units(tmp_path, capsys):
    f = tmp_path / "t.jsonl"
    rows = [(0, 10, 1), (1000, 20, 3), (3000, 30, 5)]  # Mooncake timestamps are in ms
    f.write_text("\n".join(json.dumps({"timestamp": a, "input_length": b, "output_length": c}) for a, b, c in rows))
    rc, out, _ = _cli(["trace", str(f)], capsys)
    assert rc == 0
    assert "span: 3.0 s" in out and "0.667 req/s" in out and "prompt tokens: mean 20" in out


def test_capacity_says_when_no_merge_happened(tmp_path, capsys):
    """A horizon too short for the policy's interval: the answer carries a warning line and the
    whatif table a column saying so, instead of a bare 'training costs 0.0%'."""
    argv = ["--policy", "fixed", "--param", "H=256", "--seeds", "1", "--horizon", "20", "--tol", "0.5"]
    rc, out, err = _cli(["capacity", BURSTY, *argv, "--workers", "1", "--no-progress"], capsys)
    assert rc == 0 and "warning: fixed: no run made a merge" in out and "0.0 merges per run" in out
    d = tmp_path / "w"
    vary = ["--vary", "fleet.interisland_gbps=10,100", "--out", str(d)]
    rc, out, err = _cli(["whatif", BURSTY, *argv, *vary, "--workers", "1", "--no-progress"], capsys)
    assert rc == 0 and "2 values of fleet.interisland_gbps" in out and "too few merges" in out
    md = (d / "whatif.md").read_text()
    assert "merges per run" in md and "no run made a merge" in md
    prov = json.loads((d / "whatif.json").read_text())["provenance"]
    assert prov["policy"] == "fixed" and prov["seeds"] == [0] and prov["search"]["horizon_s"] == 20


def test_result_files_name_their_units_and_phases(tmp_path, capsys):
    """requests.csv has no `merge` column (DataFrame.merge) and writes phases by name; every column
    the files hold is in the data dictionary."""
    import pandas as pd

    out = tmp_path / "o"
    argv = ["run", BURSTY, "--set", "horizon_s=120", "--set", "merge.h_min=64", "--set", "merge.h_max=128"]
    assert _cli([*argv, "--set", "policy.params.H=96", "--out", str(out)], capsys)[0] == 0
    req = pd.read_csv(out / "requests.csv", keep_default_na=False)
    assert "merge" not in req.columns and {"arrival_s", "prompt_tokens", "ttft_s", "merge_index"} <= set(req.columns)
    hit = req[req["merge_index"] >= 0]
    assert len(hit) and set(hit["merge_phase"]) <= {"stage", "allreduce", "outer", "ckpt"}
    assert set(req.loc[req["merge_index"] < 0, "merge_phase"]) <= {""}
    merges = pd.read_csv(out / "merges.csv")
    assert (merges["duration_s"] > 0).all() and "ckpt_end_s" in merges.columns
    timeline = pd.read_csv(out / "timeline.csv")
    dictionary = (ROOT / "docs" / "data_dictionary.md").read_text()
    for col in [*req.columns, *timeline.columns, "merge_index", "decided_at_s", "start_s", "end_s", "duration_s"]:
        assert f"`{col}`" in dictionary, col
    summary = json.loads((out / "summary.json").read_text())
    for key in summary:
        assert f"`{key}`" in dictionary or key.endswith(("_p50_s", "_p95_s", "_p99_s")), key


def test_pure_flag_runs_the_pure_core_with_the_same_results(tmp_path):
    """`wadiloco --pure` picks the pure-Python serving core (models/engine/_fast/__init__.py) in a real process, says so
    in the run's provenance, and gives the requests the default core gives."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "WADILOCO_PURE"}
    cores, tables = [], []
    for flags in (["--pure"], []):
        out = tmp_path / ("pure" if flags else "default")
        cmd = [sys.executable, "-m", "wadiloco.experiments.cli", *flags, "run", str(ROOT / "scenarios" / "bursty.yaml")]
        cmd += ["--set", "horizon_s=4", "--set", "drain_s=1", "--out", str(out)]
        subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
        cores.append(json.loads((out / "summary.json").read_text())["provenance"]["serving_core"])
        tables.append((out / "requests.csv").read_bytes())
    assert cores[0] == "pure" and cores[1] != "pure"
    assert tables[0] == tables[1]
