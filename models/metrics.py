"""Per-request table and run summary: plain numpy, no SimPy.

A request *overlaps* a merge when its lifetime [arrival, finish] intersects the merge's
[start, end]; its phase is the merge phase it shares the most time with. An unfinished request
(still in flight when the run stops) counts as an SLO violation and as ending at +inf.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PHASE_NAMES = ("stage", "allreduce", "outer", "ckpt")


def request_table(per_sidecar, ttft_slo: float, tpot_slo: float, merges) -> dict[str, np.ndarray]:
    """per_sidecar: [(arrival, prompt, output, admitted, first_token, finish), ...]."""
    cols = {k: [] for k in ("sidecar", "arrival", "prompt", "output", "admitted", "first_token", "finish")}
    for s, (t, p, o, adm, ft, fin) in enumerate(per_sidecar):
        cols["sidecar"].append(np.full(len(t), s, dtype=np.int32))
        cols["arrival"].append(t)
        cols["prompt"].append(p)
        cols["output"].append(o)
        cols["admitted"].append(adm)
        cols["first_token"].append(ft)
        cols["finish"].append(fin)
    r = {k: (np.concatenate(v) if v else np.empty(0)) for k, v in cols.items()}
    order = np.lexsort((r["sidecar"], r["arrival"]))
    r = {k: v[order] for k, v in r.items()}
    r["ttft"] = r["first_token"] - r["arrival"]
    r["e2e"] = r["finish"] - r["arrival"]
    with np.errstate(invalid="ignore", divide="ignore"):
        r["tpot"] = np.where(r["output"] > 1, (r["finish"] - r["first_token"]) / np.maximum(r["output"] - 1, 1), 0.0)
    done = ~np.isnan(r["finish"])
    r["completed"] = done
    with np.errstate(invalid="ignore"):
        r["violated"] = ~done | (r["ttft"] > ttft_slo) | (r["tpot"] > tpot_slo)
    merge_id = np.full(len(r["arrival"]), -1, dtype=np.int32)
    phase = np.full(len(r["arrival"]), -1, dtype=np.int8)
    best = np.zeros(len(r["arrival"]))
    end = np.where(done, r["finish"], np.inf)
    for m in merges:
        for pi, name in enumerate(PHASE_NAMES):
            if name not in m.phases:
                continue
            a, b = m.phases[name]
            ov = np.minimum(end, b) - np.maximum(r["arrival"], a)
            inter = (r["arrival"] <= b) & (end >= a)
            hit = inter & ((merge_id < 0) | (ov > best))
            merge_id[hit] = m.index
            phase[hit] = pi
            best[hit] = np.maximum(ov[hit], 0.0)
    r["merge"] = merge_id
    r["phase"] = phase
    return r


def _pct(x: np.ndarray, q: float) -> float:
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")


def summarize(r: dict[str, np.ndarray], merges, ttft_slo: float, tpot_slo: float) -> dict[str, Any]:
    n = len(r["arrival"])
    viol = r["violated"]
    overl = r["merge"] >= 0
    by_phase = {name: int(np.sum(viol & (r["phase"] == i))) for i, name in enumerate(PHASE_NAMES)}
    by_phase["none"] = int(np.sum(viol & ~overl))
    durs = [m.duration for m in merges]
    phase_means = {
        name: float(np.mean([m.phases[name][1] - m.phases[name][0] for m in merges])) if merges else 0.0
        for name in PHASE_NAMES
    }
    e2e_in = r["e2e"][overl & r["completed"]]
    e2e_out = r["e2e"][~overl & r["completed"]]
    return {
        "requests": n,
        "completed": int(np.sum(r["completed"])),
        "unfinished": int(n - np.sum(r["completed"])),
        "slo_violations": int(np.sum(viol)),
        "slo_violation_rate": float(np.mean(viol)) if n else 0.0,
        "ttft_p50_s": _pct(r["ttft"], 50),
        "ttft_p95_s": _pct(r["ttft"], 95),
        "ttft_p99_s": _pct(r["ttft"], 99),
        "tpot_p50_s": _pct(r["tpot"], 50),
        "tpot_p95_s": _pct(r["tpot"], 95),
        "e2e_p50_s": _pct(r["e2e"], 50),
        "e2e_p95_s": _pct(r["e2e"], 95),
        "e2e_p99_s": _pct(r["e2e"], 99),
        "merges": len(merges),
        "merge_duration_mean_s": float(np.mean(durs)) if durs else 0.0,
        "merge_phase_mean_s": phase_means,
        "overlap_requests": int(np.sum(overl)),
        "violations_by_phase": by_phase,
        "e2e_p95_overlap_s": _pct(e2e_in, 95),
        "e2e_p95_no_overlap_s": _pct(e2e_out, 95),
        "slo": {"ttft_s": ttft_slo, "tpot_s": tpot_slo},
    }
