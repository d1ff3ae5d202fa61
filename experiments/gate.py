"""The claim gate's wording and its sensitivity to the transfer threshold (experiments.protocol).

A verdict follows the numbers: where merges do not move latency it says so with the ratio and its
CI; where they speed up the requests they overlap, or the matched-random draws have fewer
violations than no_sync, it says merges relieve serving (there is no harm for placement to avoid);
where the effect comes through a co-tenant's window after each merge, the ratio is measured on that
window and the wording says so.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from wadiloco.experiments.stats import CI, NO_VARIANCE
from wadiloco.models.results import metrics as M

DRAWS, ALL_MERGING, OWN = "matched-random draws", "all runs with merges", "the policy's own runs"
HARMS, SMALL, NONE, RELIEVES, UNMEASURED = "harms", "below threshold", "none", "relieves", "unmeasured"


def bounds(ci: CI | None) -> tuple[float, float]:
    """A CI's bounds for a decision: data without variance are known exactly (both bounds the mean)."""
    if ci is None:
        return math.nan, math.nan
    if ci.note == NO_VARIANCE or ci.note == "all zero":
        return ci.mean, ci.mean
    return ci.low, ci.high


def transfer_state(ratio: CI, draws_se: CI | None, threshold: float) -> str:
    """harms: the ratio's CI lies above 1 and the ratio reaches `threshold`; below threshold: above 1
    but smaller; relieves: the CI lies below 1, or the draws' sync-excess CI below 0; none: neither."""
    if not math.isfinite(ratio.mean):
        return UNMEASURED
    lo, hi = bounds(ratio)
    if lo > 1 and ratio.mean >= threshold:
        return HARMS
    if hi < 1 or bounds(draws_se)[1] < 0:
        return RELIEVES
    return SMALL if lo > 1 else NONE


def _ci_text(ci: CI, digits: int = 3) -> str:
    if math.isfinite(ci.low) and math.isfinite(ci.high):
        return f"{ci.mean:.{digits}f} [{ci.low:.{digits}f}, {ci.high:.{digits}f}]"
    return f"{ci.mean:.{digits}f} ({ci.note or 'no CI'})"


def transfer_reason(t: dict[str, Any], threshold: float) -> str:
    """Why the effect-transfer part of the gate failed, in the numbers' own terms."""
    where = "co-tenant window after a merge" if t["window"] == M.COTENANT_WINDOWS else "merge"
    state, ratio = t["state"], f"p95 ratio on {t['basis']} {_ci_text(t['ratio'])}"
    if state == UNMEASURED:
        return f"effect transfer unmeasured (no request overlapped a {where})"
    if state == RELIEVES:
        se = t["draws_se"]
        se_text = f"; their sync-excess {se.mean * 100:+.3f} pts" if se is not None and math.isfinite(se.mean) else ""
        if se is not None and math.isfinite(se.low):
            se_text += f" [{se.low * 100:+.3f}, {se.high * 100:+.3f}]"
        return f"merges relieve serving here ({ratio}{se_text}): there is no harm for placement to avoid"
    if state == SMALL:
        return f"effect too small ({ratio}, above 1 but below the gate's {threshold:g})"
    return f"effect does not transfer ({ratio}; needs the CI above 1 and a ratio >= {threshold:g})"


def verdict(arm, pa: dict, comp: dict | None, gate: dict, st) -> str:
    """`demonstrated`, or `not demonstrated: <every gate that failed>` (n/a for baseline and controls)."""
    if arm.role == "baseline":
        return "n/a: no-sync baseline"
    if arm.role == "control":
        return "n/a: matched-random control"
    why = []
    if pa["n_errors"] or len(pa["runs"]) < pa["expected"]:
        why.append(f"incomplete ({len(pa['runs'])} of {pa['expected']} runs completed)")
    if pa["se"].n < 2:
        why.append(f"too few seeds with a sync-excess value (n={pa['se'].n})")
    if not gate["load_match"]:
        bad = gate["mismatched"]
        why.append(
            f"loads differ (load hash mismatch on seeds {', '.join(map(str, bad[:10]))})"
            if bad
            else "load match unchecked (no runs)"
        )
    if not gate["transfer"]["transfers"]:
        why.append(transfer_reason(gate["transfer"], st.min_ratio))
    why += _placement_reasons(comp, st.alpha)
    return "demonstrated" if not why else "not demonstrated: " + "; ".join(why)


def _placement_reasons(comp: dict | None, alpha: float) -> list[str]:
    if comp is None:
        return ["no matched-random control spends this policy's merge budget"]
    if comp["informative_seeds"] == 0:
        return [f"placement not testable against {comp['control']} (every run on every seed has the same violations)"]
    p, ph = comp["p_placement"], comp["p_placement_holm"]
    if math.isfinite(ph) and ph < alpha:
        return []
    return [
        f"not better placed than {comp['control']} (placement test: mean rank {comp['mean_rank']:.3f} of 1, "
        f"p {p:.3g}, Holm {ph:.3g}, alpha {alpha:g})"
    ]


def beats(comp: dict | None, alpha: float) -> bool:
    return comp is not None and math.isfinite(comp["p_placement_holm"]) and comp["p_placement_holm"] < alpha


def sensitivity(regimes: list[tuple], st) -> pd.DataFrame:
    """Per regime, transfer basis and threshold: whether the effect transfers and which policies the
    gate would then call demonstrated (the other gates unchanged). Bases: the matched-random draws
    (or all runs with merges where there are none; the gate's), all runs with merges pooled, and
    each policy's own ratio."""
    rows = []
    for rname, arms, per_arm, comps, gate in regimes:
        t = gate["transfer"]
        pols = [a for a in arms if a.role == "policy"]
        winners = [a.label for a in pols if gate["load_match"] and beats(_comp(comps, a.label), st.alpha)]
        for basis, ci in ((t["basis"], t["ratio"]), (ALL_MERGING + " (pooled)", t["pooled"])):
            for th in st.alternatives:
                ok = transfer_state(ci, t["draws_se"], th) == HARMS
                rows.append(_sens_row(rname, basis, ci, th, ok, winners if ok else []))
        for th in st.alternatives:
            won = [a for a in winners if transfer_state(per_arm[a]["mratio"], None, th) == HARMS]
            rows.append(_sens_row(rname, OWN, None, th, None, won))
    return pd.DataFrame(rows, columns=SENS_COLUMNS)


SENS_COLUMNS = ["regime", "basis", "ratio", "ci_low", "ci_high", "threshold", "transfers", "demonstrated"]


def _comp(comps: list[dict], label: str) -> dict | None:
    return next((c for c in comps if c["policy"] == label), None)


def _sens_row(rname: str, basis: str, ci: CI | None, th: float, ok: bool | None, won: list[str]) -> list:
    nan = math.nan
    mean, lo, hi = (ci.mean, ci.low, ci.high) if ci is not None else (nan, nan, nan)
    return [
        rname,
        basis,
        mean,
        lo,
        hi,
        th,
        "per policy" if ok is None else ("yes" if ok else "no"),
        ", ".join(won) or "none",
    ]
