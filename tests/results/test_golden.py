"""Golden outputs: a few small scenarios run through `wadiloco run --out`, compared with tests/golden/.

Each case is a shipped scenario at 120 s with a 64-128 step corridor (so even 120 s sees merges),
written to a temporary YAML; its summary.json (less the wall time) and the sha256 of requests.csv and
merges.csv as the CLI writes them must equal the stored ones exactly. Any change to what the simulator
computes shows up here, which is the point: a refactor must leave these files alone, and a change that
means to alter results regenerates them with `pytest tests/results/test_golden.py --update-golden` and says
why in its commit (tests/golden/README.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from wadiloco.experiments.cli import main
from wadiloco.models.spec.load import load_scenario

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# the scenario's own policy must fit the smaller corridor; each case picks its policy on the command line
SMALL = {
    "horizon_s": 120,
    "drain_s": 30,
    "merge": {"h_min": 64, "h_max": 128},
    "policy": {"name": "fixed", "params": {"H": 96}},
}

# case -> (shipped scenario, `wadiloco run` arguments after the scenario)
CASES = {
    "bursty_fixed": ("bursty", ["--policy", "fixed", "--param", "H=80"]),
    "bursty_wa_diloco": ("bursty", ["--policy", "wa_diloco"]),
    "bursty_matched_random": ("bursty", ["--policy", "matched_random", "--seed", "1", "--draw", "2"]),
    "sustained_sync_heavy_online_forecast": ("sustained_sync_heavy", ["--policy", "online_forecast"]),
    "normal_no_sync": ("normal", ["--policy", "no_sync", "--seed", "3"]),
    "azure_conv_overlap_oracle": ("azure_conv", ["--policy", "overlap_oracle"]),
}
TRACE_CASES = {"azure_conv_overlap_oracle"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _outputs(scenario: Path, args: list[str], out: Path, capsys) -> dict:
    assert main(["run", str(scenario), *args, "--out", str(out), "--check"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("wall_time_s")
    summary.pop("no_sync_wall_time_s", None)  # the paired no_sync run's (wall times differ between machines)
    # The digest hashes the scenario, its trace's absolute path included, so it depends on where the
    # checkout is: checked against the scenario that ran rather than stored.
    assert summary.pop("scenario_digest") == load_scenario(scenario).digest()
    # Provenance names the version and git revision, which move with every commit: checked, not stored.
    prov = summary.pop("provenance")
    assert prov["policy"] == summary["policy"] and prov["policy_params"] == summary["policy_params"]
    assert prov["seed"] == summary["seed"] and prov["scenario"]["name"] == summary["scenario"]
    assert prov["version"] and prov["scenario_file"] == str(scenario)
    return {
        "args": args,
        "summary": summary,
        "requests_csv_sha256": _sha256(out / "requests.csv"),
        "merges_csv_sha256": _sha256(out / "merges.csv"),
    }


def _differences(want: dict, got: dict) -> list[str]:
    ws, gs = want["summary"], got["summary"]
    diff = [
        f"summary.{k}: {ws.get(k)!r} -> {gs.get(k)!r}" for k in sorted(ws.keys() | gs.keys()) if ws.get(k) != gs.get(k)
    ]
    diff += [f"{k}: {want[k]} -> {got.get(k)}" for k in sorted(want) if k != "summary" and want[k] != got.get(k)]
    return diff


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case, tmp_path, capsys, derive_scenario, update_golden, request):
    name, args = CASES[case]
    if case in TRACE_CASES:
        request.getfixturevalue("shared_dir")  # skips without ../shared or $WADILOCO_SHARED
    scenario = derive_scenario(ROOT / "scenarios" / f"{name}.yaml", tmp_path / "scenario", SMALL)
    got = _outputs(scenario, args, tmp_path / "out", capsys)
    path = GOLDEN / f"{case}.json"
    if update_golden:
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return
    assert path.is_file(), f"{path.name} missing: run pytest {__file__} --update-golden and commit it"
    want = json.loads(path.read_text())
    assert want["args"] == args, "the case's command changed; regenerate its golden file"
    diff = _differences(want, got)
    assert not diff, f"{case} differs from {path.name}:\n  " + "\n  ".join(diff)


def test_golden_cases_are_meaningful():
    """Every stored file belongs to a case, and the cases exercise what they are meant to: merges
    happen (except no_sync), requests complete, the matched control spent its reference's budget."""
    assert {p.stem for p in GOLDEN.glob("*.json")} == set(CASES)
    for case in CASES:
        s = json.loads((GOLDEN / f"{case}.json").read_text())["summary"]
        assert s["completed"] > 1000, case
        assert (s["merges"] == 0) == (s["policy"] == "no_sync"), case
        assert len(s["merge_steps"]) == s["merges"]
        assert all(b - a >= 64 for a, b in zip(s["merge_steps"], s["merge_steps"][1:])), case
        if s["policy"] == "matched_random":
            assert s["reference_merges"] == s["merges"] > 0
