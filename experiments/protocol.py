"""The calibration protocol (SPEC.md section 4), per regime x policy, from the stored runs.

1. Load match: every run on a (regime, seed) must have the same `load_hash` (common random
   numbers): the arrivals of an open-loop workload; for closed-loop clients, whose arrival times
   depend on the engine and so differ by policy, what the clients send (models.clients.load_hash).
   Sync-excess SLO violation = a run's violation rate minus no_sync's on the same seed.
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
from wadiloco.experiments.sweep.plan import Arm, Plan, Regime
from wadiloco.models import metrics as M
from wadiloco.models.rng import stream

RUN_COLUMNS = [
    ("regime", "str"),
    ("policy", "str"),
    ("policy_name", "str"),
    ("role", "str"),
    ("seed", "Int64"),
    ("draw", "Int64"),
    ("status", "str"),
    (M.REQUESTS, "Int64"),
    (M.COMPLETED, "Int64"),
    (M.SLO_VIOLATIONS, "Int64"),
    (M.SLO_VIOLATION_RATE, "float"),
    (M.BASELINE_VIOLATION_RATE, "float"),
    (M.SYNC_EXCESS, "float"),
    (M.MERGES, "Int64"),
    (M.INNER_STEPS, "Int64"),
    (M.REFERENCE_MERGES, "Int64"),
    (M.MERGE_DURATION_MEAN, "float"),
    (M.TTFT_P95, "float"),
    (M.TPOT_P95, "float"),
    (M.E2E_P95, "float"),
    (M.E2E_P95_OVERLAP, "float"),
    (M.E2E_P95_NO_OVERLAP, "float"),
    (M.P95_RATIO, "float"),
    (M.E2E_P95_OVERLAP_MATCHED, "float"),
    (M.E2E_P95_OVERLAP_BASELINE, "float"),
    (M.P95_RATIO_MATCHED, "float"),
    (M.OVERLAP_REQUESTS, "Int64"),
    (M.FINAL_LOSS, "float"),
    ("scenario_hash", "str"),
    ("params_hash", "str"),
    (M.ARRIVALS_HASH, "str"),
    (M.LOAD_HASH, "str"),
    ("error", "str"),
]
# Figures copied from a run's summary as they are, and those read as floats (None -> NaN).
_AS_IS = (M.REQUESTS, M.COMPLETED, M.SLO_VIOLATIONS, M.MERGES, M.INNER_STEPS, M.OVERLAP_REQUESTS)
_FLOATS = (
    M.MERGE_DURATION_MEAN,
    M.TTFT_P95,
    M.TPOT_P95,
    M.E2E_P95,
    M.E2E_P95_OVERLAP,
    M.E2E_P95_NO_OVERLAP,
    M.E2E_P95_OVERLAP_MATCHED,
    M.E2E_P95_OVERLAP_BASELINE,
    M.FINAL_LOSS,
)

SE, VR, LOSS = M.SYNC_EXCESS, "violation_rate", M.FINAL_LOSS  # stems of the summary's mean/CI columns
SUMMARY_COLUMNS = [
    "regime",
    "policy",
    "policy_name",
    "role",
    "n_seeds",
    "n_runs",
    "n_errors",
    f"{VR}_mean",
    f"{VR}_ci_low",
    f"{VR}_ci_high",
    f"{SE}_mean",
    f"{SE}_ci_low",
    f"{SE}_ci_high",
    M.P95_RATIO,
    f"{M.P95_RATIO}_ci_low",
    f"{M.P95_RATIO}_ci_high",
    M.P95_RATIO_MATCHED,
    f"{M.P95_RATIO_MATCHED}_ci_low",
    f"{M.P95_RATIO_MATCHED}_ci_high",
    "transfer_metric",
    "regime_p95_ratio",
    "regime_p95_ratio_ci_low",
    "regime_p95_ratio_ci_high",
    "effect_transfers",
    "load_match",
    f"{M.MERGES}_mean",
    f"{LOSS}_mean",
    f"{LOSS}_ci_low",
    f"{LOSS}_ci_high",
    "matched_control",
    "mr_envelope_low",
    "mr_envelope_high",
    f"mr_{SE}_mean",
    "diff_vs_matched_random",
    "p_vs_matched_random",
    "p_holm",
    "verdict",
    "notes",
]
COMPARISON_COLUMNS = ["regime", "policy", "control", "n_pairs", "diff_mean", "p_value", "p_holm", "note"]


def _num(x) -> float:
    return float(x) if x is not None and not (isinstance(x, float) and math.isnan(x)) else float("nan")


def runs_table(plan: Plan, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per stored run, in the plan's order (regime, policy, seed, draw)."""
    by_key = {(r["scenario_hash"], r["policy_label"], r["params_hash"], r["seed"], r["draw"]): r for r in rows}
    recs = []
    for reg in plan.regimes:
        base_rate = {}
        for s in plan.seeds:
            b = by_key.get(plan.key(reg, plan.baseline, s, 0))
            if b and b["status"] == "ok":
                base_rate[s] = _num(b["summary"].get(M.SLO_VIOLATION_RATE))
        for arm in plan.arms:
            for s in plan.seeds:
                for d in range(arm.draws):
                    r = by_key.get(plan.key(reg, arm, s, d))
                    if r is not None:
                        recs.append(_run_record(reg, arm, s, d, r, base_rate.get(s, float("nan"))))
    df = pd.DataFrame.from_records(recs, columns=[c for c, _ in RUN_COLUMNS])
    for c, t in RUN_COLUMNS:
        df[c] = (
            df[c].astype("Int64")
            if t == "Int64"
            else (df[c].astype(float) if t == "float" else df[c].fillna("").astype(str))
        )
    return df.reset_index(drop=True)


def _run_record(reg: Regime, arm: Arm, seed: int, draw: int, r: dict[str, Any], base_rate: float) -> dict[str, Any]:
    sm = r["summary"] or {}
    rate = _num(sm.get(M.SLO_VIOLATION_RATE)) if r["status"] == "ok" else float("nan")
    rec: dict[str, Any] = {"regime": reg.name, "policy": arm.label, "policy_name": arm.name, "role": arm.role}
    rec.update(seed=seed, draw=draw, status=r["status"], scenario_hash=reg.digest, params_hash=arm.params_hash)
    rec.update({c: sm.get(c) for c in _AS_IS})
    rec.update({c: _num(sm.get(c)) for c in _FLOATS})
    rec[M.SLO_VIOLATION_RATE] = rate
    rec[M.BASELINE_VIOLATION_RATE] = base_rate
    rec[M.SYNC_EXCESS] = M.sync_excess(rate, base_rate)
    rec[M.REFERENCE_MERGES] = (r["reference"] or {}).get("merges")
    rec[M.P95_RATIO] = M.p95_ratio(rec[M.E2E_P95_OVERLAP], rec[M.E2E_P95_NO_OVERLAP])
    rec[M.P95_RATIO_MATCHED] = M.p95_ratio(rec[M.E2E_P95_OVERLAP_MATCHED], rec[M.E2E_P95_OVERLAP_BASELINE])
    rec[M.ARRIVALS_HASH] = sm.get(M.ARRIVALS_HASH, "")
    rec[M.LOAD_HASH] = sm.get(M.LOAD_HASH, rec[M.ARRIVALS_HASH])
    rec["error"] = r.get("error") or ""
    return rec


def load_check(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (regime, seed): how many distinct loads (load hashes) the completed runs saw (1 = matched)."""
    ok = runs[runs["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=["regime", "seed", "runs", "distinct_loads", "matched"])
    g = ok.groupby(["regime", "seed"], sort=False)[M.LOAD_HASH].agg(["size", "nunique"]).reset_index()
    g.columns = ["regime", "seed", "runs", "distinct_loads"]
    g["matched"] = g["distinct_loads"] == 1
    return g


class _Settings:
    """The analysis settings of a plan: bootstrap streams, the gate, the transfer metric's columns."""

    def __init__(self, plan: Plan):
        b, g = plan.bootstrap, plan.gate
        self.kw = {"confidence": b.confidence, "n_resamples": b.n_resamples, "method": b.method}
        self.seed = int(b.seed)
        self.seeds = list(plan.seeds)
        self.alpha, self.min_ratio, self.metric = float(g.alpha), float(g.min_p95_ratio), g.transfer
        self.env_lo, self.env_hi = g.envelope
        self.num, self.den, self.ratio = (
            (M.E2E_P95_OVERLAP_MATCHED, M.E2E_P95_OVERLAP_BASELINE, M.P95_RATIO_MATCHED)
            if g.transfer == "matched"
            else (M.E2E_P95_OVERLAP, M.E2E_P95_NO_OVERLAP, M.P95_RATIO)
        )

    def mean(self, x, *names) -> CI:
        return bootstrap_mean_ci(x, rng=stream(self.seed, "bootstrap", *names), **self.kw)

    def ratio_ci(self, num, den, *names) -> CI:
        return bootstrap_ratio_of_means_ci(num, den, rng=stream(self.seed, "bootstrap", *names), **self.kw)

    def per_seed(self, df: pd.DataFrame, col: str) -> np.ndarray:
        """Mean over draws per seed (NaN where the seed has no finite value), in seed order."""
        if df.empty:
            return np.full(len(self.seeds), np.nan)
        m = df.groupby("seed")[col].mean()
        return np.array([m.get(s, np.nan) for s in self.seeds], dtype=float)


def analyse(plan: Plan, runs: pd.DataFrame) -> dict[str, Any]:
    """The protocol's tables: summary (regime x policy), comparisons, load check, regime transfer."""
    st = _Settings(plan)
    loads = load_check(runs)
    ok_runs = runs[runs["status"] == "ok"]
    summary_rows, comparisons, transfer = [], [], {}
    for reg in plan.regimes:
        rname = reg.name
        lr = loads[loads["regime"] == rname]
        mismatched = lr.loc[~lr["matched"], "seed"].tolist() if not lr.empty else []
        load_match = bool(len(lr) and not mismatched)
        t_ci = _regime_transfer(ok_runs[ok_runs["regime"] == rname], rname, st)
        transfers = bool(math.isfinite(t_ci.low) and t_ci.low > 1.0 and t_ci.mean >= st.min_ratio)
        transfer[rname] = {"ratio": t_ci, "transfers": transfers}
        arms = [a for a in plan.arms if a.runs_in(rname)]
        per_arm = {
            a.label: _arm_stats(runs[(runs["regime"] == rname) & (runs["policy"] == a.label)], a, st, rname)
            for a in arms
        }
        comps = _comparisons(arms, per_arm, rname, st.alpha)
        comparisons.extend(comps)
        gate = (load_match, mismatched, transfers, t_ci)
        summary_rows += [_summary_row(rname, a, per_arm, comps, gate, st) for a in arms]
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)
    for c in ("n_seeds", "n_runs", "n_errors"):
        summary[c] = summary[c].astype("Int64")
    comp_df = pd.DataFrame(comparisons, columns=COMPARISON_COLUMNS)
    return {"summary": summary, "comparisons": comp_df, "loads": loads, "transfer": transfer}


def _regime_transfer(rr: pd.DataFrame, rname: str, st: _Settings) -> CI:
    """Regime-level effect transfer: every run with merges and both latency groups, per seed."""
    merging = rr[(rr[M.MERGES].fillna(0) > 0) & rr[st.ratio].notna()]
    return st.ratio_ci(st.per_seed(merging, st.num), st.per_seed(merging, st.den), rname, "*", st.ratio)


def _arm_stats(a_all: pd.DataFrame, arm: Arm, st: _Settings, rname: str) -> dict[str, Any]:
    """One arm's figures in one regime, from its runs there (failed ones counted, not used)."""
    lab = arm.label
    a = a_all[a_all["status"] == "ok"]
    se = st.per_seed(a, M.SYNC_EXCESS)
    ov = a[a[M.P95_RATIO].notna()]
    mo = a[a[M.P95_RATIO_MATCHED].notna()]
    return {
        "se_seed": se,
        "runs": a,
        "n_errors": int((a_all["status"] != "ok").sum()),
        "expected": len(st.seeds) * arm.draws,
        "vr": st.mean(st.per_seed(a, M.SLO_VIOLATION_RATE), rname, lab, VR),
        "se": st.mean(se, rname, lab, M.SYNC_EXCESS),
        "ratio": st.ratio_ci(
            st.per_seed(ov, M.E2E_P95_OVERLAP), st.per_seed(ov, M.E2E_P95_NO_OVERLAP), rname, lab, M.P95_RATIO
        ),
        "mratio": st.ratio_ci(
            st.per_seed(mo, M.E2E_P95_OVERLAP_MATCHED),
            st.per_seed(mo, M.E2E_P95_OVERLAP_BASELINE),
            rname,
            lab,
            M.P95_RATIO_MATCHED,
        ),
        "loss": st.mean(st.per_seed(a, M.FINAL_LOSS), rname, lab, M.FINAL_LOSS),
        "merges": float(a[M.MERGES].mean()) if len(a) else float("nan"),
        "envelope": envelope(a[M.SYNC_EXCESS], st.env_lo, st.env_hi) if arm.role == "control" else (np.nan,) * 2,
    }


def _comparisons(arms: list[Arm], per_arm: dict[str, dict], rname: str, alpha: float) -> list[dict[str, Any]]:
    """Each evaluated policy vs every control spending the same merge budget; Holm over the regime's."""
    comps = []
    for arm in arms:
        if arm.role != "control":
            continue
        c_arm = per_arm[arm.label]
        for pol in arms:
            if pol.role != "policy" or pol.budget != arm.reference:
                continue
            d = per_arm[pol.label]["se_seed"] - c_arm["se_seed"]
            p, note = paired_wilcoxon(d)
            dd = d[np.isfinite(d)]
            comps.append(
                {
                    "regime": rname,
                    "policy": pol.label,
                    "control": arm.label,
                    "n_pairs": int(len(dd)),
                    "diff_mean": float(np.mean(dd)) if len(dd) else float("nan"),
                    "p_value": p,
                    "note": note,
                }
            )
    for c, ph in zip(comps, holm([c["p_value"] for c in comps], alpha)):
        c["p_holm"] = float(ph)
    return comps


def _summary_row(rname: str, arm: Arm, per_arm: dict, comps: list[dict], gate: tuple, st: _Settings) -> dict:
    load_match, mismatched, transfers, t_ci = gate
    lab, pa = arm.label, per_arm[arm.label]
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
    ctrl = lab if arm.role == "control" else comp["control"] if comp else ""
    env = per_arm[ctrl]["envelope"] if ctrl else (np.nan, np.nan)
    verdict = _verdict(arm, pa, comp, load_match, mismatched, transfers, t_ci, st.min_ratio, st.alpha, len(st.seeds))
    vr, se, ratio, mratio, loss = pa["vr"], pa["se"], pa["ratio"], pa["mratio"], pa["loss"]
    nan = float("nan")
    values = [
        *(rname, lab, arm.name, arm.role, int(se.n), int(len(pa["runs"])), pa["n_errors"]),
        *(vr.mean, vr.low, vr.high, se.mean, se.low, se.high),
        *(ratio.mean, ratio.low, ratio.high, mratio.mean, mratio.low, mratio.high),
        *(st.metric, t_ci.mean, t_ci.low, t_ci.high, transfers, load_match),
        *(pa["merges"], loss.mean, loss.low, loss.high),
        *(ctrl, env[0], env[1], per_arm[ctrl]["se"].mean if ctrl else nan),
        *((comp["diff_mean"], comp["p_value"], comp["p_holm"]) if comp else (nan, nan, nan)),
        *(verdict, "; ".join(notes)),
    ]
    return dict(zip(SUMMARY_COLUMNS, values, strict=True))


def _verdict(arm, pa, comp, load_match, mismatched, transfers, t_ci: CI, min_ratio, alpha, n_seeds) -> str:
    if arm.role == "baseline":
        return "n/a: no-sync baseline"
    if arm.role == "control":
        return "n/a: matched-random control"
    why = []
    if pa["n_errors"] or len(pa["runs"]) < pa["expected"]:
        why.append(f"incomplete ({len(pa['runs'])} of {pa['expected']} runs completed)")
    if pa["se"].n < 2:
        why.append(f"too few seeds with a sync-excess value (n={pa['se'].n})")
    if not load_match:
        why.append(
            f"loads differ (load hash mismatch on seeds {', '.join(map(str, mismatched[:10]))})"
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
