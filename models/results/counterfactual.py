"""What the merges did to serving: a run against the same scenario and seed without merges (no_sync).

Both runs serve the same requests (common random numbers: the same arrival and token streams), so
the difference is the merges' doing and nothing else: the *sync-excess* (violation rate with
merges minus without, the paper's metric), the extra violations, and the share of the run's
violations they are. A request that overlapped a merge phase is not thereby caused by it (most
would have violated anyway in a burst); where the two runs served the very same requests in the
same order (an open loop: equal arrival hashes), each request is paired with itself, and the
requests that violate only with merges, and only without, are counted by the merge phase they
overlapped in the run with merges.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wadiloco.models.results import metrics as M

BASELINE_POLICY = "no_sync"
# the baseline's figures the summary repeats beside the run's (keys as in the run's summary)
BASELINE_KEYS = (
    M.REQUESTS,
    "unfinished",
    M.SLO_VIOLATIONS,
    M.SLO_VIOLATION_RATE,
    M.TTFT_P95,
    M.TPOT_P95,
    M.E2E_P95,
    M.INNER_STEPS,
    M.FINAL_LOSS,
    M.ARRIVALS_HASH,
)


def same_requests(summary: dict[str, Any], base_summary: dict[str, Any], n: int, n_base: int) -> bool:
    """Whether two runs served the very same requests in the same order (equal arrival hashes)."""
    h = summary.get(M.ARRIVALS_HASH)
    return bool(h) and h == base_summary.get(M.ARRIVALS_HASH) and n == n_base


def paired(
    summary: dict[str, Any], req: dict[str, np.ndarray], base_summary: dict[str, Any], base_req: dict[str, np.ndarray]
) -> dict[str, Any]:
    """The run's figures against its no_sync twin: `baseline` (the twin's figures), `sync_excess`
    (fraction), `extra_violations`, `merges_violation_share` (extra over the run's violations; None
    without violations) and `by_request` (None unless the same requests were served: see
    module docstring)."""
    v, b = int(summary[M.SLO_VIOLATIONS]), int(base_summary[M.SLO_VIOLATIONS])
    extra = v - b
    same = same_requests(summary, base_summary, len(req["arrival"]), len(base_req["arrival"]))
    return {
        "baseline": {"policy": BASELINE_POLICY, **{k: base_summary.get(k) for k in BASELINE_KEYS}},
        M.SYNC_EXCESS: M.sync_excess(float(summary[M.SLO_VIOLATION_RATE]), float(base_summary[M.SLO_VIOLATION_RATE])),
        "extra_violations": extra,
        "merges_violation_share": extra / v if v else None,
        "by_request": by_request(req, base_req["violated"]) if same else None,
    }


def by_request(req: dict[str, np.ndarray], base_violated: np.ndarray) -> dict[str, Any]:
    """Requests that violate only with merges and only without, each by the merge phase it
    overlapped in the run with merges (`none`: no merge)."""
    viol, base = np.asarray(req["violated"], bool), np.asarray(base_violated, bool)
    only_with, only_without = viol & ~base, base & ~viol
    return {
        "only_with_merges": int(only_with.sum()),
        "only_without_merges": int(only_without.sum()),
        "only_with_merges_by_phase": _by_phase(only_with, req["phase"]),
        "only_without_merges_by_phase": _by_phase(only_without, req["phase"]),
    }


def _by_phase(mask: np.ndarray, phase: np.ndarray) -> dict[str, int]:
    out = {name: int(np.sum(mask & (phase == i))) for i, name in enumerate(M.PHASE_NAMES)}
    out["none"] = int(np.sum(mask & (phase < 0)))
    return out
