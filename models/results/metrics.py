"""Per-request table, run summary and the per-run figures the protocol compares: plain numpy, no SimPy.

A request *overlaps* a merge when its lifetime [arrival, finish] intersects the merge's
[start, end]; its phase is the merge phase it shares the most time with. An unfinished request
(still in flight when the run stops) counts as an SLO violation and as ending at +inf.

The column constants below are the names of a run's figures wherever they travel (the summary,
the store, runs.csv); the protocol, report and figures import them instead of spelling them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wadiloco.models.spec.scenario import MERGE_PHASES as PHASE_NAMES  # the order a merge runs them in

# ---- a run's figures, by column name ------------------------------------------------------------
REQUESTS = "requests"
COMPLETED = "completed"
SLO_VIOLATIONS = "slo_violations"
SLO_VIOLATION_RATE = "slo_violation_rate"
MERGES = "merges"  # completed merges
MERGES_UNFINISHED = "merges_unfinished"  # a merge still running when the run ended (0 or 1)
MERGE_DURATION_MEAN = "merge_duration_mean_s"
OVERLAP_REQUESTS = "overlap_requests"
TTFT_P95 = "ttft_p95_s"
TPOT_P95 = "tpot_p95_s"
E2E_P95 = "e2e_p95_s"
E2E_P95_OVERLAP = "e2e_p95_overlap_s"  # requests overlapping a merge, this run
E2E_P95_NO_OVERLAP = "e2e_p95_no_overlap_s"  # requests overlapping none, this run
E2E_P95_OVERLAP_MATCHED = "e2e_p95_overlap_matched_s"  # requests overlapping a merge, this run
E2E_P95_OVERLAP_BASELINE = "e2e_p95_overlap_baseline_s"  # the same requests under no_sync, same seed
# set by the fleet and the runner
INNER_STEPS = "inner_steps"
FINAL_LOSS = "final_loss"
ARRIVALS_HASH = "arrivals_hash"  # the requests as they arrived: same value = same requests, same order
LOAD_HASH = "load_hash"  # what the clients send: the arrivals (open loop), or models.workload.clients.load_hash
REFERENCE_MERGES = "reference_merges"
WALL_TIME = "wall_time_s"
SIM_TIME = "sim_time_s"
# derived from two runs (this one and no_sync's on the same regime and seed) or from two figures
# what "overlapping a merge" meant for the matched ratio: the merges themselves, or (where merges act
# through a co-tenant's window after each merge, the testbed twin) those windows
OVERLAP_WINDOW, MERGE_WINDOWS, COTENANT_WINDOWS = "overlap_window", "merges", "cotenant"
BASELINE_VIOLATION_RATE = "baseline_violation_rate"
SYNC_EXCESS = "sync_excess"
P95_RATIO = "p95_ratio"  # E2E_P95_OVERLAP / E2E_P95_NO_OVERLAP
P95_RATIO_MATCHED = "p95_ratio_matched"  # E2E_P95_OVERLAP_MATCHED / E2E_P95_OVERLAP_BASELINE


OVERLAP_BLOCK = 256  # rows per block of merge_overlaps' running maximum


def request_table(
    per_sidecar, ttft_slo: float | None, tpot_slo: float | None, merges, e2e_slo: float | None = None
) -> dict[str, np.ndarray]:
    """per_sidecar: [(arrival, prompt, output, admitted, first_token, finish[, extra]), ...]. `extra`
    (closed loops, models.workload.clients) maps column names to per-request arrays; its `done` (when the client
    saw the request done, None: at its finish) is what e2e is measured to, and is not a column."""
    cols = {k: [] for k in ("sidecar", "arrival", "prompt", "output", "admitted", "first_token", "finish")}
    done_at: list[np.ndarray] = []
    for s, (t, p, o, adm, ft, fin, *more) in enumerate(per_sidecar):
        cols["sidecar"].append(np.full(len(t), s, dtype=np.int32))
        cols["arrival"].append(t)
        cols["prompt"].append(p)
        cols["output"].append(o)
        cols["admitted"].append(adm)
        cols["first_token"].append(ft)
        cols["finish"].append(fin)
        if more:
            extra = dict(more[0])
            done = extra.pop("done", None)
            done_at.append(fin if done is None else done)
            for k, v in extra.items():
                cols.setdefault(k, []).append(v)
    r = {k: (np.concatenate(v) if v else np.empty(0)) for k, v in cols.items()}
    done_t = np.concatenate(done_at) if done_at else None
    # by arrival, ties by sidecar: the rows are in sidecar order, so a stable sort on arrival alone
    # gives np.lexsort((sidecar, arrival))'s permutation (merging sorted runs: cheaper)
    order = np.argsort(r["arrival"], kind="stable")
    r = {k: v[order] for k, v in r.items()}
    r["ttft"] = r["first_token"] - r["arrival"]
    seen = done_t[order] if done_at else r["finish"]  # when the client saw each request done
    r["e2e"] = seen - r["arrival"]
    with np.errstate(invalid="ignore", divide="ignore"):
        r["tpot"] = np.where(r["output"] > 1, (r["finish"] - r["first_token"]) / np.maximum(r["output"] - 1, 1), 0.0)
    done = ~np.isnan(seen)
    r["completed"] = done
    r["violated"] = violations(r, ttft_slo, tpot_slo, e2e_slo)
    r["merge"], r["phase"] = merge_overlaps(r["arrival"], np.where(done, seen, np.inf), merges)
    return r


def merge_overlaps(arrival: np.ndarray, end: np.ndarray, merges) -> tuple[np.ndarray, np.ndarray]:
    """Each request's merge (index, -1: none) and phase (PHASE_NAMES index, -1), requests sorted by
    arrival, `end` +inf if unfinished: the merge phase it shares the most time with, the first of
    equals in merge then phase order. A phase [a, b] only touches rows arriving by b (a prefix) and,
    of the rows that end soon after arriving, none before the first block of OVERLAP_BLOCK rows whose
    running maximum of `end` reaches a: each phase reads that window and the few long-lived rows
    before it, with the per-row arithmetic of a pass over the whole table (the same bits)."""
    n = len(arrival)
    merge_id, phase, best = np.full(n, -1, dtype=np.int32), np.full(n, -1, dtype=np.int8), np.zeros(n)
    if n == 0 or not merges:
        return merge_id, phase
    with np.errstate(invalid="ignore"):
        life = end - arrival
    k99 = (99 * (n - 1)) // 100
    short = life <= 4.0 * np.partition(life, k99)[k99]  # unfinished rows (+inf) are never short
    longs = np.flatnonzero(~short)
    blocks = -(-n // OVERLAP_BLOCK)
    ends = np.full(blocks * OVERLAP_BLOCK, -np.inf)
    ends[:n][short] = end[short]
    reach = np.maximum.accumulate(ends.reshape(blocks, OVERLAP_BLOCK).max(axis=1))
    for m in merges:
        for pi, name in enumerate(PHASE_NAMES):
            if name not in m.phases:
                continue
            a, b = m.phases[name]
            lo = int(np.searchsorted(reach, a, "left")) * OVERLAP_BLOCK
            hi = int(np.searchsorted(arrival, b, "right"))
            if lo < hi:
                w = slice(lo, hi)  # views: _overlap writes through
                _overlap(arrival[w], end[w], merge_id[w], phase[w], best[w], a, b, m.index, pi)
            k = longs[: np.searchsorted(longs, min(lo, hi))]  # the long-lived rows before the window
            if len(k):
                mk, pk, bk = merge_id[k], phase[k], best[k]
                _overlap(arrival[k], end[k], mk, pk, bk, a, b, m.index, pi)
                merge_id[k], phase[k], best[k] = mk, pk, bk
    return merge_id, phase


def _overlap(arr, end, merge_id, phase, best, a: float, b: float, index: int, pi: int) -> None:
    """Rows whose lifetime overlaps [a, b] more than their best so far (or that have none) take it."""
    ov = np.minimum(end, b) - np.maximum(arr, a)
    hit = (arr <= b) & (end >= a) & ((merge_id < 0) | (ov > best))
    merge_id[hit] = index
    phase[hit] = pi
    best[hit] = np.maximum(ov[hit], 0.0)


# The request table's columns as a user reads them (requests.csv): units in the names, the merge
# phase by name, and no column called `merge` (it would shadow DataFrame.merge). Columns not named
# here (an extra's, e.g. the testbed's labels) keep their names. docs/data_dictionary.md describes each.
REQUEST_CSV_COLUMNS = {
    "sidecar": "sidecar",
    "arrival": "arrival_s",
    "prompt": "prompt_tokens",
    "output": "output_tokens",
    "admitted": "admitted_s",
    "first_token": "first_token_s",
    "finish": "finish_s",
    "ttft": "ttft_s",
    "e2e": "e2e_s",
    "tpot": "tpot_s",
    "completed": "completed",
    "violated": "slo_violated",
    "violated_no_sync": "slo_violated_no_sync",  # `run`'s paired run without merges, same requests
    "merge": "merge_index",
    "phase": "merge_phase",
}


def labelled_requests(r: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The request table with requests.csv's column names and phases as names ('' for none)."""
    out = {REQUEST_CSV_COLUMNS.get(k, k): v for k, v in r.items()}
    if "merge_phase" in out:
        names = np.array([*PHASE_NAMES, ""], dtype=object)
        out["merge_phase"] = names[np.where(out["merge_phase"] >= 0, out["merge_phase"], len(PHASE_NAMES))]
    return out


def _span(ab: tuple[float, float]) -> float:
    return ab[1] - ab[0]


def violations(r: dict[str, np.ndarray], ttft_slo: float | None, tpot_slo: float | None, e2e_slo: float | None):
    """Per request: unfinished, or over any SLO that is set (strict >: the testbed's `latency_ms > slo_ms`)."""
    bad = ~r["completed"]
    with np.errstate(invalid="ignore"):
        for col, slo in (("ttft", ttft_slo), ("tpot", tpot_slo), ("e2e", e2e_slo)):
            if slo is not None:
                bad = bad | (r[col] > slo)
    return bad


def _pct(x: np.ndarray, *q: float) -> list[float]:
    """Percentiles `q` of the non-NaN values, NaN if there are none: np.percentile's (method linear),
    bit for bit. np.percentile reads only the order statistics at the floor of each virtual index and
    the next one, so one partition puts those in place (each kth element is the one a sort would put
    there), a few passes over the array rather than a sort of it."""
    xs = x[~np.isnan(x)]
    n = len(xs)
    if not n:
        return [float("nan")] * len(q)
    lo = np.floor((n - 1) * np.true_divide(np.asarray(q, dtype=np.float64), 100)).astype(np.intp)
    xs.partition(np.unique(np.concatenate([lo, np.minimum(lo + 1, n - 1)])))
    return sorted_percentiles(xs, q)


def sorted_percentiles(xs: np.ndarray, q) -> list[float]:
    """np.percentile(xs, q) (q in [0, 100]) of a sorted, NaN-free, non-empty xs (or one whose order
    statistics at each virtual index's floor and the next are in place: `_pct`): numpy's linear
    method step for step (numpy.lib._function_base_impl: the virtual index (n - 1) q / 100, its floor
    and the next order statistic, both the last one past the end, and `_lerp`, which interpolates
    from the nearer one).
    tests/engine/test_setup_cuts.py checks it against np.percentile on ties, infinities and any q."""
    n = len(xs)
    v = (n - 1) * np.true_divide(np.asarray(q, dtype=np.float64), 100)
    lo = np.floor(v)
    hi = lo + 1
    top = v >= n - 1
    lo[top] = hi[top] = -1
    gamma = v - lo
    a, b = xs[lo.astype(np.intp)], xs[hi.astype(np.intp)]
    with np.errstate(invalid="ignore"):  # (inf - inf: NaN, as numpy gives)
        d = b - a
        r = a + d * gamma
        np.subtract(b, d * (1 - gamma), out=r, where=gamma >= 0.5)
    return [float(x) for x in r]


def summarize(
    r: dict[str, np.ndarray], merges, ttft_slo: float | None, tpot_slo: float | None, e2e_slo: float | None = None
) -> dict[str, Any]:
    n = len(r["arrival"])
    viol = r["violated"]
    overl = r["merge"] >= 0
    by_phase = {name: int(np.sum(viol & (r["phase"] == i))) for i, name in enumerate(PHASE_NAMES)}
    by_phase["none"] = int(np.sum(viol & ~overl))
    done = [m for m in merges if not m.unfinished]  # durations of completed merges only (one cut short says less)
    durs = [m.duration for m in done]
    phase_means = {  # a phase the scenario's merges do not run (merge.phases) lasts 0
        name: float(np.mean([_span(m.phases.get(name, (0.0, 0.0))) for m in done])) if done else 0.0
        for name in PHASE_NAMES
    }
    e2e_in = r["e2e"][overl & r["completed"]]
    e2e_out = r["e2e"][~overl & r["completed"]]
    ttft, tpot, e2e = _pct(r["ttft"], 50, 95, 99), _pct(r["tpot"], 50, 95), _pct(r["e2e"], 50, 95, 99)
    return {
        REQUESTS: n,
        COMPLETED: int(np.sum(r["completed"])),
        "unfinished": int(n - np.sum(r["completed"])),
        SLO_VIOLATIONS: int(np.sum(viol)),
        SLO_VIOLATION_RATE: float(np.mean(viol)) if n else None,  # no requests: no rate (null, not 0)
        "ttft_p50_s": ttft[0],
        TTFT_P95: ttft[1],
        "ttft_p99_s": ttft[2],
        "tpot_p50_s": tpot[0],
        TPOT_P95: tpot[1],
        "e2e_p50_s": e2e[0],
        E2E_P95: e2e[1],
        "e2e_p99_s": e2e[2],
        MERGES: len(done),
        MERGES_UNFINISHED: len(merges) - len(done),
        MERGE_DURATION_MEAN: float(np.mean(durs)) if durs else 0.0,
        "merge_phase_mean_s": phase_means,
        OVERLAP_REQUESTS: int(np.sum(overl)),
        "violations_by_phase": by_phase,
        E2E_P95_OVERLAP: _pct(e2e_in, 95)[0],
        E2E_P95_NO_OVERLAP: _pct(e2e_out, 95)[0],
        "slo": {"ttft_s": ttft_slo, "tpot_s": tpot_slo} | ({"e2e_s": e2e_slo} if e2e_slo is not None else {}),
    }


# ---- per-run figures for the protocol ----------------------------------------------------------


def censored_e2e(e2e: np.ndarray, arrival: np.ndarray, end_s: float) -> np.ndarray:
    """End-to-end latency per request; an unfinished request counts until the end of the run."""
    e2e = np.asarray(e2e, dtype=float)
    return np.where(np.isfinite(e2e), e2e, end_s - np.asarray(arrival, dtype=float))


def matched_latency(
    e2e: np.ndarray, overlaps: np.ndarray, arrivals_hash: str | None, baseline_e2e: np.ndarray | None, baseline_hash
) -> dict[str, Any]:
    """Common-random-numbers effect size: the p95 (censored) end-to-end latency of the requests that
    overlap a merge in this run, and of *the same requests* in the no_sync run on the same seed.
    Same arrivals (checked by hash) means same requests in the same order, so the ratio isolates
    what the merges did to them, free of the bias that long requests overlap merges more often.
    None where there is nothing to compare: no baseline, other arrivals, or no overlapping request."""
    out: dict[str, float | None] = {E2E_P95_OVERLAP_MATCHED: None, E2E_P95_OVERLAP_BASELINE: None}
    mask = np.asarray(overlaps, dtype=bool)
    if baseline_e2e is None or baseline_hash != arrivals_hash or len(baseline_e2e) != len(mask) or not mask.any():
        return out
    out[E2E_P95_OVERLAP_MATCHED] = float(np.percentile(np.asarray(e2e, dtype=float)[mask], 95))
    out[E2E_P95_OVERLAP_BASELINE] = float(np.percentile(np.asarray(baseline_e2e, dtype=float)[mask], 95))
    return out


def split_p95(e2e: np.ndarray, overlaps: np.ndarray) -> dict[str, float | None]:
    """p95 latency of the overlapping requests and of the others, in one run (None: no such request)."""
    e2e, m = np.asarray(e2e, dtype=float), np.asarray(overlaps, dtype=bool)
    return {
        E2E_P95_OVERLAP: float(np.percentile(e2e[m], 95)) if m.any() else None,
        E2E_P95_NO_OVERLAP: float(np.percentile(e2e[~m], 95)) if (~m).any() else None,
    }


def window_overlaps(arrival: np.ndarray, end: np.ndarray, windows) -> np.ndarray:
    """Whether each request, alive over [arrival, end], shares time with any (on, off) window."""
    hit = np.zeros(len(arrival), dtype=bool)
    for on, off in windows:
        hit |= (arrival < off) & (end > on)
    return hit


def run_record(summary: dict[str, Any], matched: dict[str, float | None]) -> dict[str, Any]:
    """What a sweep keeps of a run: its summary and matched latencies, without the wall time (which
    differs between machines and would make equal runs look different)."""
    return {k: v for k, v in {**summary, **matched}.items() if k != WALL_TIME}


def sync_excess(rate: float, baseline_rate: float) -> float:
    """SLO violation rate with merges minus the no_sync run's on the same regime and seed."""
    return rate - baseline_rate


def p95_ratio(num: float, den: float) -> float:
    """A ratio of two p95 latencies; NaN unless both are finite and the denominator positive."""
    return num / den if math.isfinite(num) and math.isfinite(den) and den > 0 else float("nan")
