"""The calibration protocol (SPEC.md section 4), per regime x policy, from the stored runs.

1. Load match: every run on a (regime, seed) must have the same `arrivals_hash` (common random
   numbers); sync-excess SLO violation = a run's violation rate minus no_sync's on the same seed.
2. Effect-size transfer, two ways, each as the ratio of per-seed means with a paired bootstrap CI
   over seeds:
   - `p95_ratio` (SPEC's wording): p95 end-to-end latency of the requests that overlap a merge over
     that of the requests that do not, within the same run. Biased upwards even when merges do
     nothing: a request overlaps a merge more often the longer it lives.
   - `p95_ratio_matched` (common random numbers): p95 of the overlapping requests over the p95 of
     *the same requests* in the no_sync run on the same seed. Same arrivals, so the only difference
     is what the merges did to them.
   The gate uses the *regime-level* ratio (`gate.transfer`, default `matched`; all runs with merges,
   per seed): a policy that dodges bursts overlaps few requests, so its own ratio says little about
   whether merges move latency at all. The effect transfers when that CI lies above 1 and the
   ratio is at least `gate.min_p95_ratio` (default 1.05).
3. Matched-random envelope: the `gate.envelope` percentiles (default 2.5-97.5) of the control's
   sync-excess over all draws x seeds. Each evaluated policy is paired with every control that
   spends the same merge budget (the control's reference is the policy, or the policy's own
   reference). Paired test per seed: policy sync-excess minus the mean over the control's draws;
   two-sided Wilcoxon signed-rank (all-zero differences: p = 1), Holm-corrected
   over every policy-vs-control comparison of the regime (statsmodels).
4. Claim gate: `demonstrated` only if the loads match, the effect transfers, and the policy has a
   lower mean sync-excess than its matched control with Holm p < alpha; otherwise
   `not demonstrated: <every reason that failed>`.
Every mean comes with a bootstrap CI (scipy.stats.bootstrap; method and resamples from the
sweep's `bootstrap` block; the resampling stream is derived from (bootstrap.seed, regime, policy,
statistic), so reports are reproducible).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wadiloco.experiments.stats import (
    CI,
    bootstrap_mean_ci,
    bootstrap_ratio_of_means_ci,
    envelope,
    holm,
    paired_wilcoxon,
)
from wadiloco.models.rng import stream

RUN_COLUMNS = [
    ("regime", "str"),
    ("policy", "str"),
    ("policy_name", "str"),
    ("role", "str"),
    ("seed", "Int64"),
    ("draw", "Int64"),
    ("status", "str"),
    ("requests", "Int64"),
    ("completed", "Int64"),
    ("slo_violations", "Int64"),
    ("slo_violation_rate", "float"),
    ("baseline_violation_rate", "float"),
    ("sync_excess", "float"),
    ("merges", "Int64"),
    ("inner_steps", "Int64"),
    ("reference_merges", "Int64"),
    ("merge_duration_mean_s", "float"),
    ("ttft_p95_s", "float"),
    ("tpot_p95_s", "float"),
    ("e2e_p95_s", "float"),
    ("e2e_p95_overlap_s", "float"),
    ("e2e_p95_no_overlap_s", "float"),
    ("p95_ratio", "float"),
    ("e2e_p95_overlap_matched_s", "float"),
    ("e2e_p95_overlap_baseline_s", "float"),
    ("p95_ratio_matched", "float"),
    ("overlap_requests", "Int64"),
    ("final_loss", "float"),
    ("scenario_hash", "str"),
    ("params_hash", "str"),
    ("arrivals_hash", "str"),
    ("error", "str"),
]

SUMMARY_COLUMNS = [
    "regime",
    "policy",
    "policy_name",
    "role",
    "n_seeds",
    "n_runs",
    "n_errors",
    "violation_rate_mean",
    "violation_rate_ci_low",
    "violation_rate_ci_high",
    "sync_excess_mean",
    "sync_excess_ci_low",
    "sync_excess_ci_high",
    "p95_ratio",
    "p95_ratio_ci_low",
    "p95_ratio_ci_high",
    "p95_ratio_matched",
    "p95_ratio_matched_ci_low",
    "p95_ratio_matched_ci_high",
    "transfer_metric",
    "regime_p95_ratio",
    "regime_p95_ratio_ci_low",
    "regime_p95_ratio_ci_high",
    "effect_transfers",
    "load_match",
    "merges_mean",
    "final_loss_mean",
    "final_loss_ci_low",
    "final_loss_ci_high",
    "matched_control",
    "mr_envelope_low",
    "mr_envelope_high",
    "mr_sync_excess_mean",
    "diff_vs_matched_random",
    "p_vs_matched_random",
    "p_holm",
    "verdict",
    "notes",
]


def active(arm: dict[str, Any], regime: str) -> bool:
    """Whether an arm runs in a regime (a sweep entry may name its regimes)."""
    return not arm.get("regimes") or regime in arm["regimes"]


def _num(x) -> float:
    return float(x) if x is not None and not (isinstance(x, float) and math.isnan(x)) else float("nan")


def runs_table(plan: dict[str, Any], rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per stored run, in the plan's order (regime, policy, seed, draw)."""
    by_key = {(r["scenario_hash"], r["policy_label"], r["params_hash"], r["seed"], r["draw"]): r for r in rows}
    recs = []
    for reg in plan["regimes"]:
        base = next(a for a in plan["arms"] if a["role"] == "baseline")
        base_rate = {}
        for s in plan["seeds"]:
            b = by_key.get((reg["scenario_hash"], base["label"], base["params_hash"], s, 0))
            if b and b["status"] == "ok":
                base_rate[s] = _num(b["summary"].get("slo_violation_rate"))
        for arm in plan["arms"]:
            for s in plan["seeds"]:
                for d in range(arm["draws"]):
                    r = by_key.get((reg["scenario_hash"], arm["label"], arm["params_hash"], s, d))
                    if r is None:
                        continue
                    sm = r["summary"] or {}
                    ok = r["status"] == "ok"
                    rate = _num(sm.get("slo_violation_rate")) if ok else float("nan")
                    br = base_rate.get(s, float("nan"))
                    ov, nov = _num(sm.get("e2e_p95_overlap_s")), _num(sm.get("e2e_p95_no_overlap_s"))
                    mo, mb = _num(sm.get("e2e_p95_overlap_matched_s")), _num(sm.get("e2e_p95_overlap_baseline_s"))
                    recs.append(
                        {
                            "regime": reg["name"],
                            "policy": arm["label"],
                            "policy_name": arm["name"],
                            "role": arm["role"],
                            "seed": s,
                            "draw": d,
                            "status": r["status"],
                            "requests": sm.get("requests"),
                            "completed": sm.get("completed"),
                            "slo_violations": sm.get("slo_violations"),
                            "slo_violation_rate": rate,
                            "baseline_violation_rate": br,
                            "sync_excess": rate - br,
                            "merges": sm.get("merges"),
                            "inner_steps": sm.get("inner_steps"),
                            "reference_merges": (r["reference"] or {}).get("merges"),
                            "merge_duration_mean_s": _num(sm.get("merge_duration_mean_s")),
                            "ttft_p95_s": _num(sm.get("ttft_p95_s")),
                            "tpot_p95_s": _num(sm.get("tpot_p95_s")),
                            "e2e_p95_s": _num(sm.get("e2e_p95_s")),
                            "e2e_p95_overlap_s": ov,
                            "e2e_p95_no_overlap_s": nov,
                            "p95_ratio": ov / nov
                            if math.isfinite(ov) and math.isfinite(nov) and nov > 0
                            else float("nan"),
                            "e2e_p95_overlap_matched_s": mo,
                            "e2e_p95_overlap_baseline_s": mb,
                            "p95_ratio_matched": mo / mb
                            if math.isfinite(mo) and math.isfinite(mb) and mb > 0
                            else float("nan"),
                            "overlap_requests": sm.get("overlap_requests"),
                            "final_loss": _num(sm.get("final_loss")),
                            "scenario_hash": reg["scenario_hash"],
                            "params_hash": arm["params_hash"],
                            "arrivals_hash": sm.get("arrivals_hash", ""),
                            "error": r.get("error") or "",
                        }
                    )
    df = pd.DataFrame.from_records(recs, columns=[c for c, _ in RUN_COLUMNS])
    for c, t in RUN_COLUMNS:
        df[c] = (
            df[c].astype("Int64")
            if t == "Int64"
            else (df[c].astype(float) if t == "float" else df[c].fillna("").astype(str))
        )
    return df.reset_index(drop=True)


def load_check(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (regime, seed): how many distinct arrival hashes the completed runs saw (1 = matched)."""
    ok = runs[runs["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=["regime", "seed", "runs", "distinct_arrivals", "matched"])
    g = ok.groupby(["regime", "seed"], sort=False)["arrivals_hash"].agg(["size", "nunique"]).reset_index()
    g.columns = ["regime", "seed", "runs", "distinct_arrivals"]
    g["matched"] = g["distinct_arrivals"] == 1
    return g


class _Boot:
    def __init__(self, plan: dict[str, Any]):
        b = plan.get("bootstrap", {})
        self.kw = {
            "confidence": b.get("confidence", 0.95),
            "n_resamples": b.get("n_resamples", 9999),
            "method": b.get("method", "BCa"),
        }
        self.seed = int(b.get("seed", 0))

    def mean(self, x, *names) -> CI:
        return bootstrap_mean_ci(x, rng=stream(self.seed, "bootstrap", *names), **self.kw)

    def ratio(self, num, den, *names) -> CI:
        return bootstrap_ratio_of_means_ci(num, den, rng=stream(self.seed, "bootstrap", *names), **self.kw)


def _per_seed(df: pd.DataFrame, col: str, seeds: list[int]) -> np.ndarray:
    """Mean over draws per seed (NaN where the seed has no finite value), in seed order."""
    if df.empty:
        return np.full(len(seeds), np.nan)
    m = df.groupby("seed")[col].mean()
    return np.array([m.get(s, np.nan) for s in seeds], dtype=float)


def analyse(plan: dict[str, Any], runs: pd.DataFrame) -> dict[str, Any]:
    """The protocol's tables: summary (regime x policy), comparisons, load check, regime transfer."""
    boot = _Boot(plan)
    gate = plan.get("gate", {})
    alpha = float(gate.get("alpha", 0.05))
    min_ratio = float(gate.get("min_p95_ratio", 1.05))
    metric = gate.get("transfer", "matched")
    num_col, den_col, ratio_col = (
        ("e2e_p95_overlap_matched_s", "e2e_p95_overlap_baseline_s", "p95_ratio_matched")
        if metric == "matched"
        else ("e2e_p95_overlap_s", "e2e_p95_no_overlap_s", "p95_ratio")
    )
    env_lo, env_hi = gate.get("envelope", (2.5, 97.5))
    seeds = list(plan["seeds"])
    loads = load_check(runs)
    ok_runs = runs[runs["status"] == "ok"]

    summary_rows, comparisons, transfer = [], [], {}
    for reg in plan["regimes"]:
        rname = reg["name"]
        rr = ok_runs[ok_runs["regime"] == rname]
        lr = loads[loads["regime"] == rname]
        mismatched = lr.loc[~lr["matched"], "seed"].tolist() if not lr.empty else []
        load_match = bool(len(lr) and not mismatched)

        # Regime-level effect transfer: every run with merges and both latency groups.
        merging = rr[(rr["merges"].fillna(0) > 0) & rr[ratio_col].notna()]
        t_ci = boot.ratio(_per_seed(merging, num_col, seeds), _per_seed(merging, den_col, seeds), rname, "*", ratio_col)
        transfers = bool(math.isfinite(t_ci.low) and t_ci.low > 1.0 and t_ci.mean >= min_ratio)
        transfer[rname] = {"ratio": t_ci, "transfers": transfers}

        arms = [a for a in plan["arms"] if active(a, rname)]
        per_arm: dict[str, dict[str, Any]] = {}
        for arm in arms:
            lab = arm["label"]
            a_all = runs[(runs["regime"] == rname) & (runs["policy"] == lab)]
            a = a_all[a_all["status"] == "ok"]
            se = _per_seed(a, "sync_excess", seeds)
            per_arm[lab] = {
                "arm": arm,
                "se_seed": se,
                "runs": a,
                "n_errors": int((a_all["status"] != "ok").sum()),
                "expected": len(seeds) * arm["draws"],
                "vr": boot.mean(_per_seed(a, "slo_violation_rate", seeds), rname, lab, "violation_rate"),
                "se": boot.mean(se, rname, lab, "sync_excess"),
                "ratio": boot.ratio(
                    _per_seed(a[a["p95_ratio"].notna()], "e2e_p95_overlap_s", seeds),
                    _per_seed(a[a["p95_ratio"].notna()], "e2e_p95_no_overlap_s", seeds),
                    rname,
                    lab,
                    "p95_ratio",
                ),
                "mratio": boot.ratio(
                    _per_seed(a[a["p95_ratio_matched"].notna()], "e2e_p95_overlap_matched_s", seeds),
                    _per_seed(a[a["p95_ratio_matched"].notna()], "e2e_p95_overlap_baseline_s", seeds),
                    rname,
                    lab,
                    "p95_ratio_matched",
                ),
                "loss": boot.mean(_per_seed(a, "final_loss", seeds), rname, lab, "final_loss"),
                "merges": float(a["merges"].mean()) if len(a) else float("nan"),
                "envelope": envelope(a["sync_excess"], env_lo, env_hi) if arm["role"] == "control" else (np.nan,) * 2,
            }

        # Each evaluated policy vs every control spending the same merge budget; Holm over the
        # regime's comparisons.
        comps = []
        for arm in arms:
            if arm["role"] != "control":
                continue
            c_arm = per_arm[arm["label"]]
            for pol in arms:
                if pol["role"] != "policy" or (pol["reference"] or pol["label"]) != arm["reference"]:
                    continue
                p_arm = per_arm[pol["label"]]
                d = p_arm["se_seed"] - c_arm["se_seed"]
                p, note = paired_wilcoxon(d)
                dd = d[np.isfinite(d)]
                comps.append(
                    {
                        "regime": rname,
                        "policy": pol["label"],
                        "control": arm["label"],
                        "n_pairs": int(len(dd)),
                        "diff_mean": float(np.mean(dd)) if len(dd) else float("nan"),
                        "p_value": p,
                        "note": note,
                    }
                )
        adj = holm([c["p_value"] for c in comps], alpha)
        for c, ph in zip(comps, adj):
            c["p_holm"] = float(ph)
        comparisons.extend(comps)

        for arm in arms:
            lab = arm["label"]
            pa = per_arm[lab]
            notes = [
                n
                for n in (
                    pa["se"].note and f"sync-excess: {pa['se'].note}",
                    pa["ratio"].note and f"p95 ratio: {pa['ratio'].note}",
                )
                if n
            ]
            mine = [c for c in comps if c["policy"] == lab]
            comp = mine[0] if mine else None
            if len(mine) > 1:
                notes.append("also compared with " + ", ".join(c["control"] for c in mine[1:]) + " (see comparisons)")
            if arm["role"] == "control":
                env = pa["envelope"]
                ctrl_label = lab
            elif comp:
                env = per_arm[comp["control"]]["envelope"]
                ctrl_label = comp["control"]
            else:
                env, ctrl_label = (np.nan, np.nan), ""
            verdict = _verdict(arm, pa, comp, load_match, mismatched, transfers, t_ci, min_ratio, alpha, len(seeds))
            summary_rows.append(
                {
                    "regime": rname,
                    "policy": lab,
                    "policy_name": arm["name"],
                    "role": arm["role"],
                    "n_seeds": int(pa["se"].n),
                    "n_runs": int(len(pa["runs"])),
                    "n_errors": pa["n_errors"],
                    "violation_rate_mean": pa["vr"].mean,
                    "violation_rate_ci_low": pa["vr"].low,
                    "violation_rate_ci_high": pa["vr"].high,
                    "sync_excess_mean": pa["se"].mean,
                    "sync_excess_ci_low": pa["se"].low,
                    "sync_excess_ci_high": pa["se"].high,
                    "p95_ratio": pa["ratio"].mean,
                    "p95_ratio_ci_low": pa["ratio"].low,
                    "p95_ratio_ci_high": pa["ratio"].high,
                    "p95_ratio_matched": pa["mratio"].mean,
                    "p95_ratio_matched_ci_low": pa["mratio"].low,
                    "p95_ratio_matched_ci_high": pa["mratio"].high,
                    "transfer_metric": metric,
                    "regime_p95_ratio": t_ci.mean,
                    "regime_p95_ratio_ci_low": t_ci.low,
                    "regime_p95_ratio_ci_high": t_ci.high,
                    "effect_transfers": transfers,
                    "load_match": load_match,
                    "merges_mean": pa["merges"],
                    "final_loss_mean": pa["loss"].mean,
                    "final_loss_ci_low": pa["loss"].low,
                    "final_loss_ci_high": pa["loss"].high,
                    "matched_control": ctrl_label,
                    "mr_envelope_low": env[0],
                    "mr_envelope_high": env[1],
                    "mr_sync_excess_mean": per_arm[ctrl_label]["se"].mean if ctrl_label else float("nan"),
                    "diff_vs_matched_random": comp["diff_mean"] if comp else float("nan"),
                    "p_vs_matched_random": comp["p_value"] if comp else float("nan"),
                    "p_holm": comp["p_holm"] if comp else float("nan"),
                    "verdict": verdict,
                    "notes": "; ".join(notes),
                }
            )
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)
    for c in ("n_seeds", "n_runs", "n_errors"):
        summary[c] = summary[c].astype("Int64")
    comp_df = pd.DataFrame(
        comparisons, columns=["regime", "policy", "control", "n_pairs", "diff_mean", "p_value", "p_holm", "note"]
    )
    return {"summary": summary, "comparisons": comp_df, "loads": loads, "transfer": transfer}


def _verdict(arm, pa, comp, load_match, mismatched, transfers, t_ci: CI, min_ratio, alpha, n_seeds) -> str:
    if arm["role"] == "baseline":
        return "n/a: no-sync baseline"
    if arm["role"] == "control":
        return "n/a: matched-random control"
    why = []
    if pa["n_errors"] or len(pa["runs"]) < pa["expected"]:
        why.append(f"incomplete ({len(pa['runs'])} of {pa['expected']} runs completed)")
    if pa["se"].n < 2:
        why.append(f"too few seeds with a sync-excess value (n={pa['se'].n})")
    if not load_match:
        why.append(
            f"loads differ (arrivals hash mismatch on seeds {', '.join(map(str, mismatched[:10]))})"
            if mismatched
            else "load match unchecked (no runs)"
        )
    if not transfers:
        if not math.isfinite(t_ci.mean):
            why.append("effect transfer unmeasured (no request overlapped a merge)")
        else:
            ci = f"CI [{t_ci.low:.3f}, {t_ci.high:.3f}]" if math.isfinite(t_ci.low) else "no CI"
            why.append(
                f"effect does not transfer (regime p95 ratio {t_ci.mean:.3f}, {ci}; needs the CI above 1 "
                f"and a ratio >= {min_ratio:g})"
            )
    if comp is None:
        why.append("no matched-random control spends this policy's merge budget")
    else:
        p = comp["p_holm"]
        diff = comp["diff_mean"]
        if not (math.isfinite(p) and p < alpha and math.isfinite(diff) and diff < 0):
            ps = f"{p:.3g}" if math.isfinite(p) else "n/a"
            ds = f"{diff * 100:+.2f} pts" if math.isfinite(diff) else "n/a"
            why.append(f"not better than {comp['control']} after Holm (diff {ds}, p_holm {ps}, alpha {alpha:g})")
    return "demonstrated" if not why else "not demonstrated: " + "; ".join(why)
