"""`wadiloco calibrate network` and `wadiloco validate diloco-measured` through the real CLI: the fit
of the example measurements, the measured cluster as a fleet (in sample, the committed predictions,
the fleet against the closed form of its run model), and bad input (one line naming the file and the
field, exit 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wadiloco.experiments.cli import main
from wadiloco.experiments.studies import diloco_measured as dm
from wadiloco.models.network import collective as co

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "validation" / "network_example"
PREDICTIONS = ROOT / "docs" / "validation" / "diloco_measured_predictions.json"


def _cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def result():
    return dm.validate()


def test_calibrate_network_fits_the_example_measurements_to_the_shipped_law(capsys):
    shaped = [f"{r:g}={g:.6g}" for r, g in ((5e7, 4.9615e7), (2e8, 1.98497e8), (1e9, 9.92647e8), (5e9, 4.963523e9))]
    argv = ["calibrate", "network", "--nccl", EXAMPLE / "nccl.json", "--iperf", "9.53e9", "--ddp", EXAMPLE / "ddp.json"]
    rc, out, err = _cli(capsys, *argv, *(a for s in shaped for a in ("--shaped", s)), "--json")
    assert rc == 0, err
    got = json.loads(out)
    assert got["ranks"] == 4 and got["eta_fitted"] and got["ddp_overlap"] == pytest.approx(0.216, abs=1e-3)
    for name, want in vars(co.DEFAULT).items():
        assert got["params"][name] == pytest.approx(want, rel=5e-3), name
    assert got["scenario"]["fleet.wan_efficiency"]["25"] == pytest.approx(co.link_efficiency("auto", 25), rel=1e-3)
    rc, out, _ = _cli(capsys, "calibrate", "network", "--nccl", EXAMPLE / "nccl.json")
    assert rc == 0 and "the shipped law (no shaped DDP runs given)" in out and "ring_step_latency_s" in out


def _one_line_error(rc: int, err: str, *names: str) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for name in names:
        assert name in lines[0], (name, err)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_calibrate_network_refuses_bad_input_in_one_line(tmp_path, capsys):
    nccl = EXAMPLE / "nccl.json"
    runs = json.loads((EXAMPLE / "ddp.json").read_text())
    runs["runs"][1]["compute_per_step_s"] = -1
    ddp = _write(tmp_path, "ddp.json", json.dumps(runs))
    _one_line_error(
        *_cli(capsys, "calibrate", "network", "--nccl", nccl, "--ddp", ddp)[::2],
        "ddp.json",
        "runs[1].compute_per_step_s",
    )
    iperf = _write(tmp_path, "pair.json", json.dumps({"start": {}}))
    _one_line_error(*_cli(capsys, "calibrate", "network", "--nccl", nccl, "--iperf", iperf)[::2], "pair.json", "end")
    empty = _write(tmp_path, "nccl.txt", "# nothing measured\n")
    _one_line_error(*_cli(capsys, "calibrate", "network", "--nccl", empty, "--ranks", "4")[::2], "nccl.txt")
    curve = _write(tmp_path, "curve.json", json.dumps([{"msg_bytes": 2**20, "bps": "fast"}]))
    _one_line_error(
        *_cli(capsys, "calibrate", "network", "--nccl", curve, "--ranks", "4")[::2], "curve.json", "[0].bps"
    )
    small = _write(tmp_path, "small.json", json.dumps({"ranks": 4, "nccl_curve": [{"msg_bytes": 2**20, "bps": 8e9}]}))
    _one_line_error(*_cli(capsys, "calibrate", "network", "--nccl", small)[::2], "small.json", "plateau")
    _one_line_error(
        *_cli(capsys, "calibrate", "network", "--nccl", tmp_path / "missing.txt")[::2], "missing.txt", "not found"
    )
    _one_line_error(*_cli(capsys, "calibrate", "network")[::2], "--nccl")
    _one_line_error(*_cli(capsys, "calibrate", "network", "--nccl", nccl, "--shaped", "5e7")[::2], "--shaped", "RATE=")
    _one_line_error(*_cli(capsys, "calibrate", "network", "--nccl", nccl, "--iperf", "-3")[::2], "--iperf")
    _one_line_error(*_cli(capsys, "calibrate", "--nccl", nccl)[::2], "--nccl", "calibrate network")


def test_a_bad_ddp_file_is_one_line_and_exit_2_across_a_real_process(tmp_path):
    ddp = _write(tmp_path, "ddp.json", json.dumps({"runs": [{"rate_bps": 1e9}]}))
    argv = ["calibrate", "network", "--nccl", str(EXAMPLE / "nccl.json"), "--ddp", str(ddp)]
    r = subprocess.run([sys.executable, "-m", "wadiloco.experiments.cli", *argv], capture_output=True, text=True)
    _one_line_error(r.returncode, r.stderr, "ddp.json", "runs[0].sync_blocked_per_step_s")
    assert r.stdout == ""


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table under the line that starts with `header`."""
    block = text.split(header, 1)[1].split("\n\n", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines() if line.startswith("| ")][1:]


def test_validate_on_the_fit_set_is_within_ten_percent_in_sample(capsys):
    rc, out, err = _cli(capsys, "validate", "diloco-measured")
    assert rc == 0, err
    rows = _table(out, "Fit set, in sample")
    runs = {r[0] for r in rows}
    assert runs == {c.name for c in dm.load()["fit"]} and len(rows) == 2 * len(runs)  # every run, two quantities
    for run, quantity, measured, simulated, error in rows:
        assert abs(float(error.rstrip("%"))) < 10, (run, quantity, measured, simulated)
    assert len(_table(out, "Predict set")) == 32


def test_validate_json_is_the_committed_predictions(capsys):
    rc, out, err = _cli(capsys, "validate", "diloco-measured", "--json")
    assert rc == 0, err
    got = json.loads(out)
    assert got == json.loads(PREDICTIONS.read_text()), "regenerate docs/validation/diloco_measured_predictions.json"
    names = {c.name for c in dm.load()["predict"]}
    assert set(got) == {"cells"} and set(got["cells"]) == names and len(names) == 32
    for v in got["cells"].values():
        assert set(v) == {"cu", "sync_s_per_outer_step"} and 0 < v["cu"] < 1 and v["sync_s_per_outer_step"] > 0


def _closed_form(c: dm.Cell, fit: dm.ClusterFit, data: dict) -> tuple[float, float]:
    """(cu, sync per outer step) of the run model by arithmetic: timed steps of compute and other time,
    the outer steps' GPU work and bookkeeping after the syncs at steps warmup .. budget - 1, the syncs
    after steps warmup + 1 .. budget, the set-up if the first of them is timed."""
    H, W, B = c.H, c.warmup, c.budget
    n_sync, n_outer = B // H - W // H, (B - 1) // H - (W - 1) // H
    s = co.allreduce_time(dm.GRAD_BYTES * data["n_params"], 4, c.rate_bps, fit.params, fit.calls, c.goodput_bps)
    sync = n_sync * s + (fit.setup_s if W < H <= B else 0.0)
    spill = fit.spill_s[c.algorithm]
    compute = (B - W) * fit.compute_s + n_outer * spill
    wall = (B - W) * (fit.compute_s + fit.other_step_s) + n_outer * (spill + fit.other_outer_s) + sync
    return compute / wall, sync / n_sync


def test_the_fleet_computes_the_run_model_of_every_predicted_cell(result):
    """The fleet's run (SimPy, fair-share fabric, merge executor, fixed policy) of each cell equals the
    closed form of the model it runs: nothing in the machinery adds or loses time."""
    data, fit = result["data"], result["fit"]
    for c in data["predict"]:
        cu, sync = _closed_form(c, fit, data)
        got = result["cells"][c.name]
        assert got["cu"] == pytest.approx(cu, rel=1e-9), c.name
        assert got["sync_s_per_outer_step"] == pytest.approx(sync, rel=1e-9), c.name


def test_the_prediction_beats_the_bytes_over_rate_estimate_in_the_direction_the_authors_saw(result):
    """The analytic model overestimates utilisation (its authors: by 1.1x to 1.9x); the fleet, which
    adds the collective's efficiency, latency and set-up, predicts lower utilisation in every cell."""
    ratios = [v["analytic_cu"] / v["cu"] for v in result["cells"].values()]
    assert min(ratios) > 1.05 and max(ratios) < 2.0


def test_the_measured_clusters_fit_is_the_shipped_default(result):
    """The defaults are the fit set's fit to three figures: the law `auto` uses is the validated one."""
    for name, want in vars(co.DEFAULT).items():
        assert getattr(result["fit"].params, name) == pytest.approx(want, rel=5e-3), name
    assert result["fit"].calls == 49 and result["fit"].setup_s == pytest.approx(0.716, abs=1e-3)


@pytest.mark.parametrize(
    "edit,field",
    [
        (lambda d: d["fit"][0]["measured"].__setitem__("compute_s", "x"), "fit[0].measured.compute_s"),
        (lambda d: d["predict"][3]["spec"].__setitem__("H", 0), "predict[3].spec.H"),
        (lambda d: d["predict"][0]["spec"].__setitem__("warmup_steps", 10**6), "predict[0].spec.warmup_steps"),
        (lambda d: d["network_profile"].__setitem__("nccl_curve", []), "network_profile.nccl_curve"),
        (lambda d: d["fit"].__setitem__(slice(5, None), []), "fit"),  # no unshaped DiLoCo runs left
        (lambda d: d.pop("n_params"), "n_params"),
    ],
    ids=["compute", "H", "warmup", "nccl", "no-diloco", "n_params"],
)
def test_validate_refuses_a_bad_data_file_in_one_line(tmp_path, capsys, edit, field):
    data = json.loads(dm.DATA.read_text())
    edit(data)
    path = _write(tmp_path, "runs.json", json.dumps(data))
    rc, _, err = _cli(capsys, "validate", "diloco-measured", "--data", path)
    _one_line_error(rc, err, "runs.json", field + ":")


def test_validate_refuses_a_file_that_is_not_json(tmp_path, capsys):
    rc, _, err = _cli(capsys, "validate", "diloco-measured", "--data", _write(tmp_path, "runs.json", "{oops"))
    _one_line_error(rc, err, "runs.json", "not valid JSON")
    assert re.search(r"runs\.json", err)
