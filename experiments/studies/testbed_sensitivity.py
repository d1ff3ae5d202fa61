"""How much each testbed prediction moves when one assumption of the twin changes.

Stage 10 cannot fix everything the Stage 11-13 predictions use (docs/sources.md, testbed 6.3, 7;
docs/testbed/). Each variant changes one assumption and reruns the Stage 11-13 part of
experiments/testbed.yaml (all seeds, all policies) into DIR/sensitivity/<variant>/; the table then
reports each prediction's move against the default run in DIR. The variants:
- batch slope: an iteration's growth per sequence is the 0.5B pair's (the default, `fitted`); 0 (a
  batch of 4 or 12 costs what a batch of 8 does per iteration) or twice the fitted slope;
- (the slope from the anomalous 1.5B medium run at c = 4 against the c = 8 targeted run is
  negative, an iteration shorter for a larger batch: a profile refuses it as unphysical, so it is no
  variant);
- the co-tenant's weight at c = 4 and 12: the weight fitted at c = 8, times 0.8 or 1.25, in the
  bursty stages only (the steady stages run at c = 8, where it was measured);
- the serving start delay: the fitted delay -2 s or +2 s;
- the harness's pressure clock: the simulated training runs read a 300-s pressure clock offset by
  150 s (half a cycle) instead of 0 (models.testbed.harness assumption 3).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from wadiloco.experiments.studies import testbed_predict as tp
from wadiloco.models.engine.profiles import load_profile, profile_path
from wadiloco.models.spec.schema import read_yaml

SWEEP = Path(__file__).resolve().parents[1] / "testbed.yaml"
PROFILE = "b200_vllm0102_eager"
MODEL = "Qwen2.5-1.5B-Instruct"
BURSTY = ("stage12_bursty", "stage13_bursty")
FOLDER = "sensitivity"
DONE = "COMPLETE"


def _profile_variant(folder: Path, name: str, edit: Callable[[dict], None]) -> str:
    """A copy of the packaged profile with one edit, written beside the variant's sweep."""
    data = read_yaml(profile_path(PROFILE))
    edit(data)
    data["name"] = f"{PROFILE}_{name}"
    path = folder / f"{name}.profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


def _slope(scale: float) -> Callable[[dict], None]:
    def edit(d: dict) -> None:
        if scale == 0:
            d["batch_slope"] = None
        else:
            d["batch_slope_scale"] = scale

    return edit


def variants() -> dict[str, dict[str, Any]]:
    """name -> what it changes: a profile edit, overrides for all or the bursty regimes, replay params."""
    prof = load_profile(PROFILE)
    w = prof.cotenant("matmul_6144x20")
    delay = prof.model(MODEL).start_delay_s
    return {
        "batch_slope_0": {"what": "batch slope 0", "profile": _slope(0)},
        "batch_slope_2x": {"what": "batch slope 2x the fitted", "profile": _slope(2.0)},
        "stress_weight_0.8x": {"what": f"co-tenant weight at c = 4/12: 0.8 x {w:.3f}", "bursty": _weight(0.8 * w)},
        "stress_weight_1.25x": {"what": f"co-tenant weight at c = 4/12: 1.25 x {w:.3f}", "bursty": _weight(1.25 * w)},
        "start_delay_-2s": {"what": f"start delay {delay - 2:.2f} s", "all": {"workload.start_delay_s": delay - 2}},
        "start_delay_+2s": {"what": f"start delay {delay + 2:.2f} s", "all": {"workload.start_delay_s": delay + 2}},
        "harness_offset_150s": {
            "what": "harness pressure clock +150 s",
            "params": {"harness_pressure_offset_s": 150.0},
        },
    }


def _weight(w: float) -> dict[str, Any]:
    return {"cotenant.profile_entry": None, "cotenant.weight": w}


def variant_spec(name: str, v: dict[str, Any], folder: Path, sweep: Path = SWEEP) -> dict[str, Any]:
    """The Stage 11-13 part of experiments/testbed.yaml (or `sweep`) with one assumption changed."""
    spec = copy.deepcopy(read_yaml(sweep))
    spec["name"] = f"testbed_{name}"
    over = dict(spec.get("overrides", {}))
    over.update(v.get("all", {}))
    if "profile" in v:
        over["engine.profile"] = _profile_variant(folder, name, v["profile"])
    spec["overrides"] = over
    regimes = []
    for path in spec["regimes"]:
        stem = Path(path).stem
        if stem.startswith(tp.STAGE10_PREFIX):
            continue
        entry: dict[str, Any] = {"path": str((sweep.parent / path).resolve())}
        if stem in BURSTY and "bursty" in v:
            entry["overrides"] = v["bursty"]
        regimes.append(entry)
    spec["regimes"] = regimes
    for pol in spec["policies"]:
        if "params" in v and pol.get("params", {}).get("schedule") == "harness":
            pol["params"] = {**pol["params"], **v["params"]}
    return spec


def run_variants(out_dir: str | Path, workers: int = 2, only: list[str] | None = None) -> list[str]:
    """Run every variant (or `only` these) into DIR/sensitivity/<name>; returns the names run."""
    from wadiloco.experiments.sweep import execute_plan, load_sweep

    root = Path(out_dir) / FOLDER
    root.mkdir(parents=True, exist_ok=True)
    done = []
    for name, v in variants().items():
        if only is not None and name not in only:
            continue
        spec_path = root / f"{name}.yaml"
        spec_path.write_text(yaml.safe_dump(variant_spec(name, v, root), sort_keys=False), encoding="utf-8")
        execute_plan(load_sweep(spec_path), root / name, workers=workers, resume=True, progress=False)
        (root / name / DONE).write_text("complete\n", encoding="utf-8")
        done.append(name)
    return done


def read_variants(out_dir: str | Path, base: dict) -> dict[str, Any]:
    """variant -> its description and, per stage and policy, the SLO % and sync-excess and their moves."""
    root = Path(out_dir) / FOLDER
    out: dict[str, Any] = {}
    if not root.is_dir():
        return out
    known = variants()
    for name in known:
        if not (root / name / DONE).is_file():  # a variant cut short is left out, not half-read
            continue
        preds = tp.predictions(tp.load_runs(root / name))
        moves: dict[str, dict[str, dict[str, float]]] = {}
        for key, cells in preds.items():
            for pol, c in cells.items():
                b = base.get(key, {}).get(pol)
                if b is None:
                    continue
                moves.setdefault(key, {})[pol] = {
                    "slo_pct": c["slo_pct"],
                    "delta_slo_pp": c["slo_pct"] - b["slo_pct"],
                    "delta_sync_excess_pp": c["sync_excess_pct"] - b["sync_excess_pct"],
                }
        out[name] = {"what": known[name]["what"], "moves": moves}
    return out


def _d(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.2f}"


def sensitivity_table(sens: dict[str, Any]) -> list[str]:
    """One row per (variant, stage): each policy's SLO % move in pp."""
    rows = ["| variant | stage | SLO % move per policy (pp) | largest move |", "|---|---|---|---|"]
    for v in sens.values():
        for key, cells in v["moves"].items():
            moves = {p: c["delta_slo_pp"] for p, c in cells.items()}
            finite = {p: m for p, m in moves.items() if math.isfinite(m)}
            big = max(finite, key=lambda p: abs(finite[p])) if finite else None
            text = ", ".join(f"{p} {_d(m)}" for p, m in moves.items())
            rows.append(f"| {v['what']} | {key} | {text} | {big} {_d(finite[big]) if big else ''} |")
    return rows
