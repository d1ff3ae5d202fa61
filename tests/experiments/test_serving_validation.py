"""`wadiloco validate vllm-h100` and `wadiloco calibrate physics` through the real CLI: the 9 fit experiments in
sample within the acceptance bars (means within 10% in median, the overloaded runs' counts within 15%), the
committed predictions of the 7 held-out ones are what the code makes, a coefficients file fitted here runs in
a scenario, and bad input is one line naming the file or flag (exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from in_process import cli

from wadiloco.experiments.studies import vllm_h100 as vh
from wadiloco.models.engine.physics_fit import coefficients_doc, default_coefficients, load_coefficients
from wadiloco.models.spec.resolve import from_dict

ROOT = Path(__file__).resolve().parents[2]
PREDICTIONS = ROOT / "docs" / "validation" / "vllm_h100_predictions.json"
FIGURES = {"e2e_mean_s", "ttft_mean_s", "itl_mean_s", "e2e_p90_s", "e2e_p99_s", "ttft_p90_s", "ttft_p99_s"}


@pytest.fixture(scope="module")
def result():
    return vh.validate()


def test_the_fit_experiments_in_sample(result):
    errs = vh.errors(result)
    for k in ("e2e_mean_s", "ttft_mean_s", "itl_mean_s"):
        assert len(errs[k]) == 9 and np.median(np.abs(errs[k])) < 0.10, (k, errs[k])
    for name, e in result["experiments"].items():
        m = e.get("measured")
        if m is not None and m["failed"] >= 50:  # the overloaded runs: who was served, who gave up
            for k in ("completed", "failed"):
                assert abs(e["predicted"][k] / m[k] - 1) < 0.15, (name, k, e["predicted"][k], m[k])


def test_json_prints_every_experiment_and_out_writes_the_rest(capsys, tmp_path):
    rc, out, err = cli(capsys, "validate", "vllm-h100", "--json", "--out", tmp_path / "v")
    assert rc == 0 and not err
    got = json.loads(out)["experiments"]
    assert len(got) == 16 and all(set(v) == FIGURES | {"completed", "failed"} for v in got.values())
    assert {p.name for p in (tmp_path / "v").iterdir()} == {"validation.json", "predictions.json", "report.txt"}
    held = json.loads((tmp_path / "v" / "predictions.json").read_text())["experiments"]
    assert len(held) == 7 and all(got[n] == v for n, v in held.items())
    assert "median |error|" in (tmp_path / "v" / "report.txt").read_text()


def test_the_committed_predictions_are_what_the_code_makes():
    made = vh.predictions_json(vh.validate(seeds=5, roles=("predict",)), held_out=True)
    assert made == json.loads(PREDICTIONS.read_text()), (
        "regenerate docs/validation/vllm_h100_predictions.json: wadiloco validate vllm-h100 --seeds 5 --out DIR"
    )


def test_a_coefficients_file_runs_in_a_scenario(tmp_path):
    c = replace(default_coefficients(), eta_f=0.5, t_api=0.01)
    (tmp_path / "c.json").write_text(json.dumps(coefficients_doc(c, {}, {"on": "a test"})))
    engine = {"latency": "physics", "model": "Llama-2-7b-hf", "gpu": "H100", "physics_coefficients": "c.json"}
    run = from_dict({"engine": engine}, tmp_path / "s.yaml", tmp_path)
    assert run.engine.latency.c == c and run.engine.api_s == 0.01


@pytest.mark.slow  # (about 10 simulations of the fit set: the least squares' first Jacobian)
def test_calibrate_physics_writes_coefficients(capsys, tmp_path):
    rc, out, err = cli(capsys, "calibrate", "physics", "--evals", "1", "--out", tmp_path / "c.json")
    assert rc == 0 and "in sample" in out
    assert load_coefficients(tmp_path / "c.json") == default_coefficients()  # one evaluation: the start, kept


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["validate", "vllm-h100", "--data", "{d}/missing.json"], ["missing.json", "not found"]),
        (["validate", "vllm-h100", "--data", "{d}/bad.json"], ["bad.json", "not valid JSON"]),
        (["validate", "vllm-h100", "--data", "{d}/no_fit.json"], ["no_fit.json", "experiments", "fit"]),
        (["validate", "vllm-h100", "--seeds", "0"], ["--seeds"]),
        (["validate", "diloco-measured", "--out", "{d}/x"], ["--out", "vllm-h100"]),
        (["calibrate", "physics", "--evals", "0"], ["--evals"]),
        (["calibrate", "--out", "{d}/c.json"], ["--out", "calibrate physics"]),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, argv, needles):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "no_fit.json").write_text(json.dumps({"experiments": []}))
    rc, out, err = cli(capsys, *(a.format(d=tmp_path) for a in argv))
    assert rc == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert all(n.format(d=tmp_path) in err for n in needles), err
