"""The twin's numbers from a testbed sweep's store: the Stage 10 side by side, and the Stage 11-13
predictions with the testbed protocol's statistics (docs/sources.md, testbed 5).

Every run of a testbed scenario carries the testbed's own summary (`summary["testbed"]`, made from
the labelled request table: models.testbed.labels.testbed_figures). Here:
- Stage 10: per calibration run, the simulated figures beside the measured ones (models/data/
  testbed/stage10.yaml) and the relative error of each. The serving run is deterministic, so the
  first seed's no_sync run is the run.
- Stages 11-13, per (stage, regime) key and policy (the artifact's names): SLO violation % (the mean
  over seeds of each seed's mean over draws) with a percentile bootstrap CI over seeds; sync-excess
  (a run's SLO % minus the no_sync run's on the same seed; the artifact has no no_sync run in Stage
  11 and reports raw SLO % there, the twin has one and reports both); the sync p95 ratio (mean over
  runs); and the protocol's verdicts against random_matched of the same stage (Stage 13: Stage 12's): the envelope (the
  policy's mean sync-excess against the 2.5-97.5 percentiles of the random runs), the paired exact
  sign-flip test over the 5 seeds (p_less: the policy's sync-excess is lower; the smallest p is
  1/32), and the gate (a claim passes when random windows do hurt, their sync p95 ratio >= 1.05,
  and the policy is below the envelope with p_less < 0.05).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from wadiloco.experiments.store import Store
from wadiloco.models.testbed import fit

FIGURES = fit.FIGURES  # requests, p50_ms, p95_ms, p99_ms, tokens_per_s, sync_ratio, high_low_ratio
STAGE10_PREFIX = "stage10_"
# sweep regime -> the stage/regime key; sweep label -> the artifact's policy name
STAGE_KEYS = {
    "stage11_pressure": "stage11_pressure",
    "stage11_sync": "stage11_sync",
    "stage12_bursty": "stage12_bursty",
    "stage13_bursty": "stage13_bursty",
}
LABEL_NAMES = {"random_matched_s12": "random_matched"}
RANDOM = "random_matched"
BASELINE = "no_sync"
CONTROL_FROM = {"stage13_bursty": "stage12_bursty"}  # Stage 13 is compared with Stage 12's random runs
STAGE13_CONTRASTS = ("wa_diloco", "random_matched", "stage12_calibrated_replay")
ALPHA = 0.05
MIN_P95_RATIO = 1.05
ENVELOPE = (2.5, 97.5)
N_BOOT = 9999


def load_runs(out_dir: str | Path) -> dict[str, dict[str, dict[tuple[int, int], dict]]]:
    """regime -> label -> (seed, draw) -> the run's testbed summary, for every ok run that has one."""
    store = Store(Path(out_dir) / "runs.sqlite", readonly=True)
    runs: dict = defaultdict(lambda: defaultdict(dict))
    try:
        for r in store.rows():
            tb = (r["summary"] or {}).get("testbed") if r["status"] == "ok" else None
            if tb is not None:
                runs[r["regime"]][r["policy_label"]][(r["seed"], r["draw"])] = tb
    finally:
        store.close()
    return {k: dict(v) for k, v in runs.items()}


def stage10_rows(runs: dict) -> list[dict[str, Any]]:
    """Per Stage 10 run in the store: measured and simulated figures and relative errors."""
    rows = []
    for spec in fit.stage10()["runs"]:
        regime = STAGE10_PREFIX + spec["name"].removeprefix("vllm-").replace("-", "_")
        got = runs.get(regime, {}).get(BASELINE)
        if not got:
            continue
        sim = got[min(got)]
        meas = {k: spec["measured"][k] for k in FIGURES}
        simulated = {k: sim.get(k) for k in FIGURES}
        err = {k: _rel(simulated[k], meas[k]) for k in FIGURES}
        rows.append({"run": spec["name"], "measured": meas, "simulated": simulated, "rel_err": err})
    return rows


def _rel(sim, meas) -> float | None:
    if sim is None or meas in (None, 0) or not math.isfinite(sim):
        return None
    return sim / meas - 1.0


def per_seed(cells: dict[tuple[int, int], dict], key: str) -> dict[int, float]:
    """seed -> the mean over that seed's draws of one figure (NaN-free draws only)."""
    by: dict[int, list[float]] = defaultdict(list)
    for (seed, _draw), tb in cells.items():
        v = tb.get(key)
        if v is not None and math.isfinite(v):
            by[seed].append(float(v))
    return {s: float(np.mean(v)) for s, v in sorted(by.items()) if v}


def bootstrap_ci(values: list[float], n: int = N_BOOT, confidence: float = 0.95, seed: int = 0) -> list[float]:
    """Percentile bootstrap CI of the mean over seeds (resampling seeds)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return [math.nan, math.nan]
    if len(x) == 1:
        return [float(x[0]), float(x[0])]
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n, len(x)))
    means = x[idx].mean(axis=1)
    a = (1 - confidence) / 2
    return [float(np.quantile(means, a)), float(np.quantile(means, 1 - a))]


def sign_flip_p_less(diffs: list[float]) -> float:
    """Exact one-sided sign-flip test: the share of the 2^n sign patterns whose mean is <= the observed."""
    d = np.asarray(diffs, dtype=float)
    if len(d) == 0:
        return math.nan
    obs = d.mean()
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
    return float(np.mean((signs * d).mean(axis=1) <= obs + 1e-12))


def _excess(cells: dict, base: dict[int, float]) -> dict[int, float]:
    """seed -> mean over draws of (SLO % - the same seed's no_sync SLO %)."""
    by: dict[int, list[float]] = defaultdict(list)
    for (seed, _draw), tb in cells.items():
        if seed in base and tb.get("slo_pct") is not None:
            by[seed].append(tb["slo_pct"] - base[seed])
    return {s: float(np.mean(v)) for s, v in sorted(by.items())}


def _draw_excess(cells: dict, base: dict[int, float]) -> list[float]:
    return [tb["slo_pct"] - base[s] for (s, _d), tb in cells.items() if s in base and tb.get("slo_pct") is not None]


def policy_cell(cells: dict, base: dict[int, float], control: tuple[dict, dict] | None) -> dict[str, Any]:
    """One policy in one stage: SLO %, its CI, sync-excess, sync p95 ratio and the verdicts."""
    slo = per_seed(cells, "slo_pct")
    exc = _excess(cells, base)
    ratios = [tb["sync_ratio"] for tb in cells.values() if tb.get("sync_ratio") is not None]
    ratios = [r for r in ratios if math.isfinite(r)]
    out: dict[str, Any] = {
        "slo_pct": float(np.mean(list(slo.values()))) if slo else math.nan,
        "slo_ci": bootstrap_ci(list(slo.values())),
        "sync_excess_pct": float(np.mean(list(exc.values()))) if exc else math.nan,
        "sync_excess_ci": bootstrap_ci(list(exc.values())),
        "sync_p95_ratio": float(np.mean(ratios)) if ratios else math.nan,
        "merges": float(np.mean([tb.get("merges", math.nan) for tb in cells.values()])),
        "runs": len(cells),
        "seeds": sorted(slo),
    }
    if control is not None:  # (random_matched's runs, the no_sync SLO % of their regime per seed)
        rnd, rnd_base = control
        out.update(verdicts(exc, _excess(rnd, rnd_base), _draw_excess(rnd, rnd_base), rnd))
    return out


def verdicts(exc: dict[int, float], rnd_exc: dict[int, float], rnd_draws: list[float], rnd: dict) -> dict:
    """Envelope, paired sign-flip test and gate of a policy against random_matched (sync-excess)."""
    lo, hi = (float(np.percentile(rnd_draws, q)) for q in ENVELOPE) if rnd_draws else (math.nan, math.nan)
    m = float(np.mean(list(exc.values()))) if exc else math.nan
    where = "below" if m < lo else "above" if m > hi else "inside"
    seeds = sorted(set(exc) & set(rnd_exc))
    p = sign_flip_p_less([exc[s] - rnd_exc[s] for s in seeds])
    ratios = [tb["sync_ratio"] for tb in rnd.values() if tb.get("sync_ratio") is not None]
    ratios = [r for r in ratios if math.isfinite(r)]
    transfers = bool(ratios) and float(np.mean(ratios)) >= MIN_P95_RATIO
    passes = transfers and where == "below" and p < ALPHA
    return {
        "envelope": [lo, hi],
        "vs_envelope": where,
        "p_less_vs_random": p,
        "effect_transfers": transfers,
        "gate": "pass" if passes else "fail",
    }


def predictions(runs: dict) -> dict[str, dict[str, dict[str, Any]]]:
    """'<stage>_<regime>' -> policy -> its cell; Stage 13 adds its paired contrasts with Stage 12."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for regime, key in STAGE_KEYS.items():
        arms = runs.get(regime)
        if not arms or BASELINE not in arms:
            continue
        base = per_seed(arms[BASELINE], "slo_pct")
        rnd_label, control = _control(runs, CONTROL_FROM.get(regime, regime))
        out[key] = {
            LABEL_NAMES.get(lab, lab): policy_cell(cells, base, None if lab in (rnd_label, BASELINE) else control)
            for lab, cells in sorted(arms.items())
        }
    s13 = out.get("stage13_bursty", {})
    if "online_calibrated_wa" in s13 and "stage12_bursty" in runs:
        s13["online_calibrated_wa"] = _with_contrasts(runs, s13["online_calibrated_wa"])
    return out


def _control(runs: dict, regime: str) -> tuple[str | None, tuple[dict, dict] | None]:
    """random_matched's label in `regime` and (its runs, that regime's no_sync SLO % per seed)."""
    arms = runs.get(regime, {})
    label = next((lab for lab in arms if LABEL_NAMES.get(lab, lab) == RANDOM), None)
    if label is None or BASELINE not in arms:
        return None, None
    return label, (arms[label], per_seed(arms[BASELINE], "slo_pct"))


def _with_contrasts(runs: dict, cell: dict) -> dict:
    """Stage 13's paired tests (the artifact's aggregator): online vs each Stage 12 baseline, p_less."""
    s13, s12 = runs["stage13_bursty"], runs["stage12_bursty"]
    online = _excess(s13["online_calibrated_wa"], per_seed(s13[BASELINE], "slo_pct"))
    base12 = per_seed(s12[BASELINE], "slo_pct")
    contrasts = {}
    for name in STAGE13_CONTRASTS:
        label = next((lab for lab in s12 if LABEL_NAMES.get(lab, lab) == name), None)
        if label is None:
            continue
        other = _excess(s12[label], base12)
        seeds = sorted(set(online) & set(other))
        contrasts[name] = sign_flip_p_less([online[s] - other[s] for s in seeds])
    return {**cell, "p_less_vs": contrasts}
