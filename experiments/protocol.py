"""The calibration protocol (docs/model.md), per regime x policy, from the stored runs.

1. Load match: every run on a (regime, seed) must have the same `load_hash` (common random
   numbers): the arrivals of an open-loop workload; for closed-loop clients, whose arrival times
   depend on the engine and so differ by policy, what the clients send (models.workload.clients.load_hash).
   Sync-excess SLO violation = a run's violation rate minus no_sync's on the same seed.
2. Effect-size transfer ("does random placement move latency?"), as the ratio of per-seed means
   with a paired bootstrap CI over seeds, on the regime's matched-random draws (all runs with
   merges where the regime has no control):
   - `p95_ratio_matched` (`gate.transfer: matched`, the default): p95 end-to-end latency of the
     requests that overlap a merge over the p95 of *the same requests* in the no_sync run on the
     same seed. Where merges act through a co-tenant's window after each merge (the testbed twin),
     "overlap" means overlapping that window (`overlap_window` in runs.csv).
   - `p95_ratio` (`gate.transfer: overlap`): overlapping over non-overlapping requests of the same
     run; biased upwards, since long requests overlap merges more often.
   Each policy's own ratio is reported beside it. The effect transfers when the CI lies above 1 and
   the ratio is at least `gate.min_p95_ratio` (1.05: a project choice, settable in the sweep file;
   the report shows the verdicts at `gate.transfer_alternatives` too). Where the CI lies below 1, or
   the draws' sync-excess CI below 0, merges relieve serving, and the verdict says so.
3. Matched-random envelope: the `gate.envelope` percentiles (default 2.5-97.5) of the control's
   sync-excess over all draws x seeds. Each evaluated policy is paired with every control that
   spends the same merge budget (the control's reference is the policy, or the policy's own
   reference). The test is `stats.placement_test`, one-sided in the claimed direction (fewer
   violations): the policy's mid-rank among its seed's R + 1 values, exact under the null that it is
   one more random placement. Holm's correction runs over the family the report claims: every
   policy-vs-control comparison of the sweep that has an informative seed (a comparison where every
   value ties on every seed has nothing to test and is reported as such, outside the family). A
   two-sided Wilcoxon signed-rank test on the policy minus the mean of the draws is kept as a
   secondary column (`p_wilcoxon`); it is not calibrated (that difference is skewed under the null).
4. Claim gate: `demonstrated` only if the loads match, the effect transfers, and the placement test
   against the matched control has Holm p < alpha; otherwise `not demonstrated: <every reason>`.
Every mean comes with a bootstrap CI (scipy.stats.bootstrap; method and resamples from the
sweep's `bootstrap` block; the resampling stream is derived from (bootstrap.seed, regime, policy,
statistic), so reports are reproducible); data without variance get none, and a note instead.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wadiloco.experiments import gate as G
from wadiloco.experiments.stats import (
    CI,
    bootstrap_mean_ci,
    bootstrap_ratio_of_means_ci,
    envelope,
    holm,
    paired_wilcoxon,
    placement_test,
)
from wadiloco.experiments.sweep.plan import Arm, Plan, Regime
from wadiloco.models.results import metrics as M
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
    (M.OVERLAP_WINDOW, "str"),
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
RATIO = "regime_p95_ratio"


def _ci_cols(stem: str, mean: str | None = None) -> list[str]:
    """A statistic's summary columns: mean, CI bounds, and the note that replaces a missing interval."""
    return [mean or f"{stem}_mean", f"{stem}_ci_low", f"{stem}_ci_high", f"{stem}_note"]


SUMMARY_COLUMNS = [
    *("regime", "policy", "policy_name", "role", "n_seeds", "n_runs", "n_errors"),
    *_ci_cols(VR),
    *_ci_cols(SE),
    *_ci_cols(M.P95_RATIO, M.P95_RATIO),
    *_ci_cols(M.P95_RATIO_MATCHED, M.P95_RATIO_MATCHED),
    *("transfer_metric", "transfer_basis", "transfer_window", "transfer_threshold"),
    *_ci_cols(RATIO, RATIO),
    *("transfer_state", "effect_transfers", "load_match", f"{M.MERGES}_mean", f"{M.OVERLAP_REQUESTS}_mean"),
    *_ci_cols(LOSS)[:3],
    *("matched_control", "mr_envelope_low", "mr_envelope_high", f"mr_{SE}_mean", "diff_vs_matched_random"),
    *("placement_rank", "placement_seeds", "placement_informative_seeds", "p_placement", "p_placement_holm"),
    *("holm_family", "p_wilcoxon", "verdict", "notes"),
]
COMPARISON_COLUMNS = [
    *("regime", "policy", "control", "n_pairs", "seeds", "informative_seeds", "mean_rank", "diff_mean"),
    *("p_placement", "p_placement_holm", "p_wilcoxon", "note"),
]
FAMILY = "policy-vs-matched-random comparisons in this sweep with an informative seed"


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
    rec[M.OVERLAP_WINDOW] = sm.get(M.OVERLAP_WINDOW) or (M.MERGE_WINDOWS if r["status"] == "ok" else "")
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
        self.alternatives = tuple(sorted({float(x) for x in g.transfer_alternatives} | {self.min_ratio}))
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

    def by_draw(self, df: pd.DataFrame, col: str) -> np.ndarray:
        """seeds x draws of `col` (NaN where a run is missing or failed), in seed order."""
        draws = int(df["draw"].max()) + 1 if len(df) else 1
        out = np.full((len(self.seeds), draws), np.nan)
        pos = {s: i for i, s in enumerate(self.seeds)}
        for s, d, v in zip(df["seed"], df["draw"], df[col]):
            out[pos[int(s)], int(d)] = v
        return out


def analyse(plan: Plan, runs: pd.DataFrame) -> dict[str, Any]:
    """The protocol's tables: summary (regime x policy), comparisons, load check, regime transfer,
    the Holm family and how the verdicts move with the transfer threshold (`sensitivity`)."""
    st = _Settings(plan)
    loads = load_check(runs)
    ok_runs = runs[runs["status"] == "ok"]
    regimes, comparisons = [], []
    for reg in plan.regimes:
        rr = runs[runs["regime"] == reg.name]
        arms = [a for a in plan.arms if a.runs_in(reg.name)]
        per_arm = {a.label: _arm_stats(rr[rr["policy"] == a.label], a, st, reg.name) for a in arms}
        comps = _comparisons(arms, per_arm, reg.name)
        regimes.append((reg.name, arms, per_arm, comps, _gate_inputs(reg.name, loads, ok_runs, st)))
        comparisons.extend(comps)
    family = _holm(comparisons, st.alpha)
    summary_rows = [
        _summary_row(name, a, pa, comps, gate, st, family) for name, arms, pa, comps, gate in regimes for a in arms
    ]
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)
    for c in ("n_seeds", "n_runs", "n_errors", "placement_seeds", "placement_informative_seeds"):
        summary[c] = summary[c].astype("Int64")
    comp_df = pd.DataFrame(comparisons, columns=COMPARISON_COLUMNS)
    transfer = {name: gate["transfer"] for name, _, _, _, gate in regimes}
    sens = G.sensitivity(regimes, st)
    return {
        "summary": summary,
        "comparisons": comp_df,
        "loads": loads,
        "transfer": transfer,
        "family": family,
        "sensitivity": sens,
    }


def _gate_inputs(rname: str, loads: pd.DataFrame, ok_runs: pd.DataFrame, st: _Settings) -> dict[str, Any]:
    """The regime-level parts of the gate: load match and effect transfer."""
    lr = loads[loads["regime"] == rname]
    mismatched = lr.loc[~lr["matched"], "seed"].tolist() if not lr.empty else []
    rr = ok_runs[ok_runs["regime"] == rname]
    return {
        "load_match": bool(len(lr) and not mismatched),
        "mismatched": mismatched,
        "transfer": _transfer(rr, rname, st),
    }


def _transfer(rr: pd.DataFrame, rname: str, st: _Settings) -> dict[str, Any]:
    """Does random placement move latency? The ratio on the matched-random draws (all runs with
    merges where there is no control), the same pooled over every run with merges, and the draws'
    sync-excess (whether merges relieve serving)."""
    metric, num, den, col = _metric(rr, st)
    merging = rr[(rr[M.MERGES].fillna(0) > 0) & rr[col].notna()]
    draws = merging[merging["role"] == "control"]
    use = draws if len(draws) else merging
    ci = st.ratio_ci(st.per_seed(use, num), st.per_seed(use, den), rname, "*", col)
    pooled = st.ratio_ci(st.per_seed(merging, num), st.per_seed(merging, den), rname, "**", col)
    ctl = rr[rr["role"] == "control"]
    se = st.mean(st.per_seed(ctl, M.SYNC_EXCESS), rname, "*", M.SYNC_EXCESS) if len(ctl) else None
    window = M.COTENANT_WINDOWS if (rr[M.OVERLAP_WINDOW] == M.COTENANT_WINDOWS).any() else M.MERGE_WINDOWS
    state = G.transfer_state(ci, se, st.min_ratio)
    basis = G.DRAWS if len(draws) else G.ALL_MERGING
    return {
        **{"ratio": ci, "pooled": pooled, "draws_se": se, "basis": basis, "window": window, "metric": metric},
        **{"state": state, "transfers": state == G.HARMS},
    }


def _metric(rr: pd.DataFrame, st: _Settings) -> tuple[str, str, str, str]:
    """The transfer metric's name and columns: the gate's, except that where merges act through a
    co-tenant window and a closed loop leaves no matched requests, the within-run ratio on the windows."""
    if st.metric != "matched" or rr[M.P95_RATIO_MATCHED].notna().any():
        return st.metric, st.num, st.den, st.ratio
    if (rr[M.OVERLAP_WINDOW] == M.COTENANT_WINDOWS).any() and rr[M.P95_RATIO].notna().any():
        return "overlap (closed loop: no matched requests)", M.E2E_P95_OVERLAP, M.E2E_P95_NO_OVERLAP, M.P95_RATIO
    return st.metric, st.num, st.den, st.ratio


def _arm_stats(a_all: pd.DataFrame, arm: Arm, st: _Settings, rname: str) -> dict[str, Any]:
    """One arm's figures in one regime, from its runs there (failed ones counted, not used)."""
    lab = arm.label
    a = a_all[a_all["status"] == "ok"]
    ov = a[a[M.P95_RATIO].notna()]
    mo = a[a[M.P95_RATIO_MATCHED].notna()]
    return {
        "se_seed": st.per_seed(a, M.SYNC_EXCESS),
        "rate_draws": st.by_draw(a, M.SLO_VIOLATION_RATE),
        "runs": a,
        "n_errors": int((a_all["status"] != "ok").sum()),
        "expected": len(st.seeds) * arm.draws,
        "vr": st.mean(st.per_seed(a, M.SLO_VIOLATION_RATE), rname, lab, VR),
        "se": st.mean(st.per_seed(a, M.SYNC_EXCESS), rname, lab, M.SYNC_EXCESS),
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
        "overlap": float(a[M.OVERLAP_REQUESTS].astype(float).mean()) if len(a) else float("nan"),
        "envelope": envelope(a[M.SYNC_EXCESS], st.env_lo, st.env_hi) if arm.role == "control" else (np.nan,) * 2,
    }


def _comparisons(arms: list[Arm], per_arm: dict[str, dict], rname: str) -> list[dict[str, Any]]:
    """Each evaluated policy vs every control spending the same merge budget: the placement test on
    the violation rates (per seed the same ranks as sync-excess), one-sided (fewer violations), and
    the Wilcoxon figure beside it."""
    comps = []
    for arm in arms:
        if arm.role != "control":
            continue
        c_arm = per_arm[arm.label]
        for pol in arms:
            if pol.role != "policy" or pol.budget != arm.reference:
                continue
            pa = per_arm[pol.label]
            pt = placement_test(pa["rate_draws"][:, 0], c_arm["rate_draws"], alternative="less")
            d = pa["se_seed"] - c_arm["se_seed"]
            pw, wnote = paired_wilcoxon(d)
            dd = d[np.isfinite(d)]
            comps.append(
                {
                    "regime": rname,
                    "policy": pol.label,
                    "control": arm.label,
                    "n_pairs": int(len(dd)),
                    "seeds": pt.n_seeds,
                    "informative_seeds": pt.n_informative,
                    "mean_rank": pt.mean_rank,
                    "diff_mean": float(np.mean(dd)) if len(dd) else float("nan"),
                    "p_placement": pt.p if pt.n_informative else float("nan"),
                    "p_placement_holm": float("nan"),
                    "p_wilcoxon": pw,
                    "note": "; ".join(n for n in (pt.note, wnote and f"Wilcoxon: {wnote}") if n),
                }
            )
    return comps


def _holm(comps: list[dict[str, Any]], alpha: float) -> str:
    """Holm over every tested comparison of the sweep (in place); the family, in words."""
    for c, ph in zip(comps, holm([c["p_placement"] for c in comps], alpha)):
        c["p_placement_holm"] = float(ph)
    n = sum(math.isfinite(c["p_placement"]) for c in comps)
    out = len(comps) - n
    return f"{n} {FAMILY}" + (f" ({out} more without one: not tested)" if out else "")


def _summary_row(
    rname: str, arm: Arm, per_arm: dict, comps: list[dict], gate: dict, st: _Settings, family: str
) -> dict:
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
    t = gate["transfer"]
    verdict = G.verdict(arm, pa, comp, gate, st)
    nan = float("nan")
    values = [
        *(rname, lab, arm.name, arm.role, int(pa["se"].n), int(len(pa["runs"])), pa["n_errors"]),
        *_ci_values(pa["vr"]),
        *_ci_values(pa["se"]),
        *_ci_values(pa["ratio"]),
        *_ci_values(pa["mratio"]),
        *(t["metric"], t["basis"], t["window"], st.min_ratio),
        *_ci_values(t["ratio"]),
        *(t["state"], t["transfers"], gate["load_match"], pa["merges"], pa["overlap"]),
        *_ci_values(pa["loss"])[:3],
        *(ctrl, env[0], env[1], per_arm[ctrl]["se"].mean if ctrl else nan, comp["diff_mean"] if comp else nan),
        *_placement_values(comp, family),
        *(verdict, "; ".join(notes)),
    ]
    return dict(zip(SUMMARY_COLUMNS, values, strict=True))


def _ci_values(ci: CI) -> tuple:
    return ci.mean, ci.low, ci.high, ci.note


def _placement_values(comp: dict | None, family: str) -> tuple:
    nan = float("nan")
    if comp is None:
        return nan, None, None, nan, nan, "", nan
    return (
        comp["mean_rank"],
        comp["seeds"],
        comp["informative_seeds"],
        comp["p_placement"],
        comp["p_placement_holm"],
        family,
        comp["p_wilcoxon"],
    )
