"""What-if capacity planning: the largest serving rate a fleet carries at an SLO attainment.

For each seed, bisection over `workload.load` (utilisation of a sidecar's capacity) finds the
largest load whose SLO attainment (share of requests meeting the SLO) still reaches the target.
Every evaluation on a seed uses the same RNG streams (common random numbers): only the load
changes between bisection steps, so the search compares like with like. The per-seed answers
give a mean and a bootstrap CI; the same search without merges (`no_sync`) gives the capacity
the fleet would have if it did not train, and the difference is what training costs.
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from wadiloco.models.config import Scenario, with_overrides
from wadiloco.models.errors import InputError


@dataclass(frozen=True)
class SearchSpec:
    attainment: float = 0.9
    lo: float = 0.05
    hi: float = 1.6
    tol: float = 0.01
    horizon_s: float | None = None


def attainment_at(
    sc: Scenario, load: float, seed: int, policy: str, params: dict | None, fleet_kw: dict | None = None
) -> tuple[float, float]:
    """(attainment, capacity_rps_per_sidecar) of one run at `load`."""
    from wadiloco.experiments.runner import run_one

    res = run_one(with_overrides(sc, {"workload.load": float(load)}), seed, policy, params, **(fleet_kw or {}))
    s = res.summary
    return 1.0 - s["slo_violation_rate"], float(s["capacity_rps_per_sidecar"] or float("nan"))


def search_seed(
    sc: Scenario, seed: int, policy: str, params: dict | None, spec: SearchSpec, fleet_kw: dict | None = None
) -> dict[str, Any]:
    """Bisection on one seed. Returns the largest load found feasible and its rate."""
    if spec.horizon_s:
        sc = with_overrides(sc, {"horizon_s": spec.horizon_s})
    lo, hi = spec.lo, spec.hi
    a_lo, cap = attainment_at(sc, lo, seed, policy, params, fleet_kw)
    evals = 1
    if a_lo < spec.attainment:
        return {
            "seed": seed,
            "max_load": 0.0,
            "max_rate": 0.0,
            "capacity_rps": cap,
            "evals": evals,
            "bracket": [0.0, lo],
            "note": f"attainment {a_lo:.3f} < target even at load {lo}",
        }
    a_hi, _ = attainment_at(sc, hi, seed, policy, params, fleet_kw)
    evals += 1
    if a_hi >= spec.attainment:
        return {
            "seed": seed,
            "max_load": hi,
            "max_rate": hi * cap,
            "capacity_rps": cap,
            "evals": evals,
            "bracket": [hi, math.inf],
            "note": f"target still met at the top of the range (load {hi})",
        }
    while hi - lo > spec.tol:
        mid = 0.5 * (lo + hi)
        a, _ = attainment_at(sc, mid, seed, policy, params, fleet_kw)
        evals += 1
        if a >= spec.attainment:
            lo = mid
        else:
            hi = mid
    return {
        "seed": seed,
        "max_load": lo,
        "max_rate": lo * cap,
        "capacity_rps": cap,
        "evals": evals,
        "bracket": [lo, hi],
        "note": "",
    }


def _task(args):
    return search_seed(*args)


def mean_ci(xs: list[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    x = np.asarray(xs, float)
    m = float(np.mean(x))
    if len(x) < 2 or np.ptp(x) == 0:
        return m, m, m
    from scipy.stats import bootstrap

    method = "BCa" if len(x) >= 5 else "percentile"
    r = bootstrap(
        (x,),
        np.mean,
        confidence_level=confidence,
        n_resamples=2000,
        method=method,
        random_state=np.random.default_rng(seed),
    )
    lo, hi = float(r.confidence_interval.low), float(r.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = float(np.min(x)), float(np.max(x))
    return m, lo, hi


def capacity(
    sc: Scenario,
    policy: str,
    params: dict | None = None,
    *,
    seeds: int = 5,
    spec: SearchSpec = SearchSpec(),
    workers: int = 1,
    fleet_kw: dict | None = None,
) -> dict[str, Any]:
    if not 0 < spec.attainment < 1:
        raise InputError("<command line>", "--attainment", f"must be between 0 and 1 (got {spec.attainment})")
    if seeds < 1:
        raise InputError("<command line>", "--seeds", "must be at least 1")
    runs = ((policy, params),) if policy == "no_sync" else ((policy, params), ("no_sync", {}))
    tasks = [(sc, s, p, pp, spec, fleet_kw) for p, pp in runs for s in range(seeds)]
    if workers > 1 and not fleet_kw:
        import multiprocessing as mp

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
            results = list(ex.map(_task, tasks))
    else:
        results = [_task(t) for t in tasks]
    pol, base = results[:seeds], results[seeds:] or results[:seeds]
    m, lo, hi = mean_ci([r["max_rate"] for r in pol])
    bm, blo, bhi = mean_ci([r["max_rate"] for r in base])
    cost = [1 - p["max_rate"] / b["max_rate"] if b["max_rate"] > 0 else float("nan") for p, b in zip(pol, base)]
    cm, clo, chi = mean_ci([c for c in cost if c == c]) if any(c == c for c in cost) else (float("nan"),) * 3
    return {
        "scenario": sc.name,
        "policy": policy,
        "attainment_target": spec.attainment,
        "seeds": seeds,
        "max_rate_rps_per_sidecar": m,
        "max_rate_ci_low": lo,
        "max_rate_ci_high": hi,
        "max_load": float(np.mean([r["max_load"] for r in pol])),
        "no_sync_max_rate_rps_per_sidecar": bm,
        "no_sync_max_rate_ci_low": blo,
        "no_sync_max_rate_ci_high": bhi,
        "capacity_cost_fraction": cm,
        "capacity_cost_ci_low": clo,
        "capacity_cost_ci_high": chi,
        "per_seed": pol,
        "no_sync_per_seed": base,
    }
