"""What-if capacity planning: the largest serving rate a fleet carries at an SLO attainment.

For each seed, bisection over `workload.load` (utilisation of a sidecar's capacity) finds the
largest load whose SLO attainment (share of requests meeting the SLO) still reaches the target.
Every evaluation on a seed uses the same RNG streams (common random numbers): only the load
changes between bisection steps, so the search compares like with like. The per-seed answers
give a mean and a bootstrap CI. Three searches on the same seeds say what training costs: the fleet
with training off (`training.enabled: false`: a real run in which no island steps, so nothing of
training is on any GPU, host or link), training without merges (`no_sync`) and training with the
policy. Inner steps cost the first difference, merges the second; both are shares of the capacity
without training, so they add up to the total (`capacity_cost` keeps the merges' cost over the
capacity no_sync leaves).

The merges' cost means something only if merges happened: every search records how many merges
the run at its answer load made, and the result says (`merge_warning`) when a policy's runs had
none, or fewer than `MIN_MERGES` (e.g. a horizon shorter than the policy's interval).

Bisection brackets each seed's answer between the last load that met the target and the first
that did not (`bracket`); the reported interval covers that resolution: from the CI's low end of
the seeds' lower ends to the CI's high end of their upper ends (seeds without variance: the ends
themselves). Bisection assumes attainment falls as load rises; every search checks that on the
loads it visited and says when it does not (`monotone_warning`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
from typing import Any, NamedTuple

import numpy as np

from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import Scenario, with_overrides

MIN_MERGES = 2  # fewer merges per run than this and a "cost of training" is one merge's anecdote
MAX_BISECTIONS = 40  # a bracket 1.55 wide narrows to 1.4e-12 in 40 steps; past that is noise


@dataclass(frozen=True)
class SearchSpec:
    attainment: float = 0.9
    lo: float = 0.05
    hi: float = 1.6
    tol: float = 0.01
    horizon_s: float | None = None

    def bisections(self) -> int:
        """Steps the bisection takes per seed to narrow [lo, hi] to `tol`."""
        return max(0, math.ceil(math.log2((self.hi - self.lo) / self.tol))) if self.tol < self.hi - self.lo else 0


def check_search(
    sc: Scenario, policy: str, seeds: int, spec: SearchSpec, workers: int = 1, params: dict | None = None
) -> None:
    """Refuse, before any run, a search that cannot be made or cannot end in reasonable time: a
    workload without a load to search, too fine a --tol, too many runs in all, or a run (at the top
    load of the bracket) that would fail to build, its policy not fitting, or over the limits."""
    from wadiloco.models.spec.limits import check_count, check_run
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.models.workload.kinds import WORKLOADS

    kind = WORKLOADS.get(str(sc.workload.get("kind")))
    if kind is not None and "load" not in kind.params.model_fields:
        raise InputError(
            sc.source,
            "workload.kind",
            f"a capacity search varies workload.load, and a {kind.name} workload has none (its clients set how "
            "much they send); use an open-loop workload kind",
        )

    if not 0 < spec.attainment < 1:
        raise InputError("<command line>", "--attainment", f"must be between 0 and 1 (got {spec.attainment})")
    if seeds < 1:
        raise InputError("<command line>", "--seeds", "must be at least 1")
    n = spec.bisections()
    if n > MAX_BISECTIONS:
        smallest = (spec.hi - spec.lo) / 2**MAX_BISECTIONS
        raise InputError(
            "<command line>",
            "--tol",
            f"{spec.tol:g} needs {n} bisection steps per seed, more than {MAX_BISECTIONS}; "
            f"use --tol {smallest:.2g} or more",
        )
    check_count("runs", seeds * arms(policy) * (2 + n), "<command line>", "--seeds", "runs this search needs")
    check_count("workers", workers, "<command line>", "--workers", "worker processes")
    top = with_overrides(
        sc, {"workload.load": float(spec.hi), **({"horizon_s": spec.horizon_s} if spec.horizon_s else {})}
    )
    check_run(top, prefix="at the top of the load bracket: ")
    resolve(
        top, policy, params, file=sc.source
    )  # what each run's resolution would refuse (a profile's fit, the policy)


class Merges(NamedTuple):
    """A run's merges: how many finished, and their mean length (s; NaN without one)."""

    n: int
    mean_s: float


def attainment_at(
    sc: Scenario, load: float, seed: int, policy: str, params: dict | None, fleet_kw: dict | None = None
) -> tuple[float, float, Merges]:
    """(attainment, capacity_rps_per_sidecar, merges) of one run at `load`; a merge still running at
    the end (unfinished) counts: it pressed on serving all the same."""
    from wadiloco.experiments.runner import run_one

    res = run_one(with_overrides(sc, {"workload.load": float(load)}), seed, policy, params, **(fleet_kw or {}))
    s = res.summary
    if s["slo_violation_rate"] is None:  # no request arrived: no attainment to compare with the target
        why = f"a run at load {load:g} (seed {seed}) had no requests, so it says nothing about the SLO"
        raise InputError(sc.source, "horizon_s", f"{why}; lengthen the horizon (--horizon)")
    n = int(s["merges"]) + int(s["merges_unfinished"])
    merges = Merges(n, float(s.get("merge_duration_mean_s") or math.nan) if s["merges"] else math.nan)
    return 1.0 - s["slo_violation_rate"], float(s["capacity_rps_per_sidecar"] or float("nan")), merges


def search_seed(
    sc: Scenario,
    seed: int,
    policy: str,
    params: dict | None,
    spec: SearchSpec,
    fleet_kw: dict | None = None,
    tick=None,
) -> dict[str, Any]:
    """Bisection on one seed: the largest load found feasible, the bracket it lies in, its rate, the
    merges the run at that load made, and the (load, attainment) points visited. `tick()` is
    called after every run (a progress bar's)."""
    if spec.horizon_s:
        sc = with_overrides(sc, {"horizon_s": spec.horizon_s})
    visited: list[tuple[float, float]] = []

    def at(load: float) -> tuple[float, float, int]:
        out = attainment_at(sc, load, seed, policy, params, fleet_kw)
        visited.append((float(load), float(out[0])))
        if tick is not None:
            tick()
        return out

    lo, hi, t = spec.lo, spec.hi, spec.attainment
    a_lo, cap, merges = at(lo)
    if a_lo < spec.attainment:
        return _found(seed, cap, visited, 0.0, merges, [0.0, lo], f"attainment {a_lo:.3f} < target at load {lo}", t)
    a_hi, _, m_hi = at(hi)
    if a_hi >= spec.attainment:
        return _found(seed, cap, visited, hi, m_hi, [hi, math.inf], f"target still met at the top ({hi})", t)
    for _ in range(MAX_BISECTIONS):  # the bound holds whatever tol is
        if not hi - lo > spec.tol:
            break
        mid = 0.5 * (lo + hi)
        a, _, m = at(mid)
        if a >= spec.attainment:
            lo, merges = mid, m
        else:
            hi = mid
    return _found(seed, cap, visited, lo, merges, [lo, hi], target=t)


def _found(
    seed: int, cap: float, visited: list, load: float, m: Merges | int, bracket: list, note: str = "", target=None
):
    """One seed's answer, with whether attainment fell with load on the points visited (`monotone`),
    and whether a rise straddles the target (`misordered`: a load that missed it below one that met
    it, so the bisection's answer may be off; a rise on one side of the target changes nothing)."""
    pts = sorted(visited)
    rises = [(a, b) for a, b in zip(pts, pts[1:]) if b[1] > a[1]]
    miss = [p for p in pts if target is not None and p[1] < target]
    misordered = bool(miss) and any(p[1] >= target and p[0] > miss[0][0] for p in pts)
    if rises:
        (l0, a0), (l1, a1) = rises[0]
        note = "; ".join(n for n in (note, f"attainment rose with load ({a0:.4f} at {l0:g}, {a1:.4f} at {l1:g})") if n)
    rec = {"seed": seed, "max_load": load, "max_rate": load * cap, "max_rate_high": bracket[1] * cap}
    n, merge_s = (m.n, m.mean_s) if isinstance(m, Merges) else (int(m), math.nan)
    rec.update(capacity_rps=cap, merges=n, merge_s=merge_s, evals=len(visited), bracket=bracket)
    rec["visited"] = [list(p) for p in pts]
    return {**rec, "monotone": not rises, "misordered": misordered, "note": note}


def _task(args):
    return search_seed(*args)


def mean_ci(xs: list[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """Mean and bootstrap CI; no interval (NaN bounds) for fewer than 2 values or no variance."""
    x = np.asarray(xs, float)
    m = float(np.mean(x))
    if len(x) < 2 or np.ptp(x) == 0:
        return m, math.nan, math.nan
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


def bracket_interval(lows: list[float], highs: list[float]) -> tuple[float, float, float]:
    """(mean of the lower ends, low, high): the CI's low end of the lower ends to the CI's high end of
    the upper ends, so the interval holds the bisection's resolution too; ends without variance (or a
    single seed) count as they are; an unbounded end gives an unbounded interval."""
    return float(np.mean(lows)), _end(lows, low=True), _end(highs, low=False)


def _end(x: list[float], low: bool) -> float:
    if not all(math.isfinite(v) for v in x):
        return -math.inf if low else math.inf
    _, lo, hi = mean_ci(x)
    end = lo if low else hi
    return end if math.isfinite(end) else float(min(x) if low else max(x))


def search_runs(spec: SearchSpec, policy: str, seeds: int) -> int:
    """Runs a search takes at most (a progress bar's total): per seed and arm, `runs_per_search`."""
    return seeds * arms(policy) * runs_per_search(spec)


def runs_per_search(spec: SearchSpec) -> int:
    """Runs one bisection takes at most: both ends of the bracket and every bisection step."""
    width = spec.hi - spec.lo
    return 2 + (math.ceil(math.log2(width / spec.tol)) if spec.tol < width else 0)


def _searches(tasks: list[tuple], spec: SearchSpec, workers: int, bar) -> list[dict[str, Any]]:
    """Every task's search, in task order; `bar` (a tqdm, or None) advances by runs."""
    per_search = runs_per_search(spec)

    def advance(n: int) -> None:
        if bar is not None and n > 0:
            bar.update(n)

    if workers > 1 and not tasks[0][-1]:  # fleet_kw (e.g. a latency model) stays in this process
        from concurrent.futures import FIRST_EXCEPTION, wait

        from wadiloco.experiments.sweep.backends import process_pool
        from wadiloco.experiments.sweep.plugins import plugin_modules

        with process_pool(min(workers, len(tasks)), plugin_modules()) as ex:  # workers die with the command
            futures = [ex.submit(_task, t) for t in tasks]
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for f in done:
                    f.result()  # a worker's error (an InputError arrives as itself) stops the search now
                    advance(per_search)
            return [f.result() for f in futures]
    results = []
    for t in tasks:
        r = search_seed(*t, tick=lambda: advance(1))
        advance(per_search - r["evals"])  # a search that ended early: its unrun steps are done
        results.append(r)
    return results


def merge_warning(
    sc: Scenario, policy: str, per_seed: list[dict[str, Any]], horizon_s: float | None, params: dict | None = None
) -> str:
    """Why a capacity cost may mean nothing: a policy whose runs made no merge, or too few; and the
    likely cause, with its numbers (few_merges_cause)."""
    if policy == "no_sync":
        return ""
    merges = [r["merges"] for r in per_seed]
    if min(merges) >= MIN_MERGES:
        return ""
    none = sum(m == 0 for m in merges)
    if none == len(merges):
        what = "no run made a merge, so this measures nothing about training's cost"
    elif none:
        what = f"{none} of {len(merges)} seeds made no merge at their answer load"
    else:
        what = f"runs made as few as {min(merges)} merge(s) (fewer than {MIN_MERGES}): the cost rests on too few merges"
    lengths = [r.get("merge_s", math.nan) for r in per_seed]
    cause = few_merges_cause(sc, params or {}, [x for x in lengths if not math.isnan(x)], horizon_s or sc.horizon_s)
    return f"{policy}: {what}; {cause}"


def few_merges_cause(sc: Scenario, params: dict, merge_s: list[float], horizon_s: float) -> str:
    """What keeps merges out of a run, with the numbers: the policy's interval against the horizon,
    or a merge's length (`merge_s`, of the merges that finished) against the interval, or both
    against the horizon. Between merges the islands take the interval's inner steps; a merge then
    holds them at its barrier for its length."""
    step = sc.training.step_time_s
    steps, what = (int(params["H"]), "the policy's interval (H)") if "H" in params else (sc.merge.h_min, "merge.h_min")
    interval = steps * step
    iv = f"{what}, {steps} inner steps x {step:g} s = {interval:.0f} s"
    shorten = "shorten the merge (a faster WAN, merge.compression, merge.fragments, checkpoint_mode: async)"
    if interval >= horizon_s:
        return f"likely cause: {iv}, is not shorter than the {horizon_s:g} s horizon (lengthen --horizon)"
    if not merge_s:  # a merge started after the first interval and none finished before the horizon
        return (
            f"likely cause: the merge's length: the first merge could start after {iv}, and none finished in the "
            f"{horizon_s - interval:.0f} s left of the {horizon_s:g} s horizon ({shorten}, or lengthen --horizon)"
        )
    mean = float(np.mean(merge_s))
    if mean >= interval:
        return (
            f"likely cause: the merge's length: a merge took {mean:.0f} s (mean), longer than {iv} ({shorten}; "
            "a longer --horizon adds few merges)"
        )
    cycle = interval + mean
    return (
        f"likely cause: the horizon: {iv}, plus a {mean:.0f} s merge is {cycle:.0f} s, {horizon_s / cycle:.1f} "
        f"times in the {horizon_s:g} s horizon (lengthen --horizon to at least {MIN_MERGES * cycle:.0f} s, or "
        "shorten the interval)"
    )


NO_TRAINING = "no_training"  # the search on the fleet with training off (training.enabled false)
BASELINE = "no_sync"  # training without merges
# each cost: (a - b) / c per seed, of the arms' largest rates (see `_cost`)
COSTS = {
    "training_cost": (NO_TRAINING, BASELINE, NO_TRAINING),  # inner steps, without merges
    "merges_cost": (BASELINE, "policy", NO_TRAINING),  # what the merges add, in the same units
    "total_cost": (NO_TRAINING, "policy", NO_TRAINING),  # the two together
    "capacity_cost": (BASELINE, "policy", BASELINE),  # the merges' cost over what training leaves
}
_BIG = 1e300  # an unbounded bracket end, as a number the corners of `_cost` can use


def arms(policy: str) -> int:
    """Searches per seed: without training, training without merges (no_sync), and the policy's (unless no_sync)."""
    return 2 if policy == BASELINE else 3


def without_training(sc: Scenario) -> Scenario:
    """The same fleet serving the same requests with training off: no inner step, no merge."""
    return with_overrides(sc, {"training.enabled": False})


def capacity(
    sc: Scenario,
    policy: str,
    params: dict | None = None,
    *,
    seeds: int = 5,
    spec: SearchSpec = SearchSpec(),
    workers: int = 1,
    fleet_kw: dict | None = None,
    bar=None,
) -> dict[str, Any]:
    """Three searches on every seed (common random numbers): without training, training without merges
    (no_sync), and training with `policy`; then what training costs (inner steps) and what the merges
    cost, each as a share of the capacity without training, so that they add up. `bar` (a tqdm)
    advances per run; its total is `search_runs(spec, policy, seeds)`. With `policy` no_sync its search
    is the baseline's: the merges' cost is NaN and `capacity_cost_note` says why."""
    if not 0 < spec.attainment < 1:
        raise InputError("<command line>", "--attainment", f"must be between 0 and 1 (got {spec.attainment})")
    if seeds < 1:
        raise InputError("<command line>", "--seeds", "must be at least 1")
    runs = [(without_training(sc), BASELINE, {}), (sc, BASELINE, {})]
    runs += [(sc, policy, params)] if policy != BASELINE else []
    tasks = [(s_arm, s, p, pp, spec, fleet_kw) for s_arm, p, pp in runs for s in range(seeds)]
    results = _searches(tasks, spec, workers, bar)
    off, base, pol = results[:seeds], results[seeds : 2 * seeds], results[2 * seeds :] or results[seeds : 2 * seeds]
    by = {NO_TRAINING: off, BASELINE: base, "policy": pol}
    out = {"scenario": sc.name, "policy": policy, "attainment_target": spec.attainment, "seeds": seeds}
    out.update(_rates(pol, ""))
    out["max_rate_upper_rps_per_sidecar"] = float(np.mean([r["max_rate_high"] for r in pol]))
    out["resolution_rps_per_sidecar"] = float(spec.tol * np.mean([r["capacity_rps"] for r in pol]))
    out["max_load"] = float(np.mean([r["max_load"] for r in pol]))
    out.update(_rates(base, "no_sync_"))
    out.update(_rates(off, "no_training_"))
    for name, (a, b, c) in COSTS.items():
        if policy == BASELINE and "policy" in (a, b, c):
            m, lo, hi, note = math.nan, math.nan, math.nan, "no_sync is its own baseline: no cost"
        else:
            m, lo, hi, note = _cost(by, a, b, c)
        out.update({f"{name}_fraction": m, f"{name}_ci_low": lo, f"{name}_ci_high": hi, f"{name}_note": note})
    out.update(
        merges_min=min(r["merges"] for r in pol),
        merges_mean=float(np.mean([r["merges"] for r in pol])),
        merge_warning=merge_warning(sc, policy, pol, spec.horizon_s, params),
        monotone_warning=monotone_warning(off + base + (pol if policy != BASELINE else [])),
    )
    return {**out, "per_seed": pol, "no_sync_per_seed": base, "no_training_per_seed": off}


def _rates(per_seed: list[dict], prefix: str) -> dict[str, float]:
    """An arm's largest rate per sidecar and its interval (bracket_interval), under `prefix`."""
    m, lo, hi = bracket_interval([r["max_rate"] for r in per_seed], [r["max_rate_high"] for r in per_seed])
    return {f"{prefix}max_rate_rps_per_sidecar": m, f"{prefix}max_rate_ci_low": lo, f"{prefix}max_rate_ci_high": hi}


def _cost(by: dict[str, list[dict]], a: str, b: str, c: str) -> tuple[float, float, float, str]:
    """(a - b) / c per seed, of the arms' largest rates (each seed's lower bracket end), and the mean
    over seeds; the interval holds every seed's brackets: per seed the least and the greatest value
    over the brackets' corners (the figure is monotone in each rate), then the CI's low end of the
    least and its high end of the greatest. A seed where `c` met the target at no load is left out."""
    keep = [i for i, r in enumerate(by[c]) if r["max_rate"] > 0]
    if not keep:
        return math.nan, math.nan, math.nan, f"{_ARM_NAMES[c]} met the target at no load searched: no cost to measure"
    names = sorted({a, b, c})

    def f(v: dict[str, float]) -> float:
        x = (v[a] - v[b]) / v[c]
        return x if abs(x) < 1e100 else math.copysign(math.inf, x)

    mids, lows, highs = [], [], []
    for i in keep:
        mids.append(f({k: by[k][i]["max_rate"] for k in names}))
        ends = [(by[k][i]["max_rate"], min(by[k][i]["max_rate_high"], _BIG)) for k in names]
        corners = [f(dict(zip(names, vals))) for vals in product(*ends)]
        lows.append(min(corners))
        highs.append(max(corners))
    return float(np.mean(mids)), _end(lows, low=True), _end(highs, low=False), ""


_ARM_NAMES = {NO_TRAINING: "the fleet without training", BASELINE: "no_sync", "policy": "the policy"}


def monotone_warning(per_seed: list[dict[str, Any]]) -> str:
    """Where a search met the target at a load above one where it missed it (bisection assumes
    attainment falls with load, so that answer may be off); rises on one side of the target are
    only counted."""
    bad = [r for r in per_seed if r.get("misordered")]
    rose = sum(not r.get("monotone", True) for r in per_seed)
    if not bad:
        return ""
    return (
        f"on {len(bad)} of {len(per_seed)} searches a load that missed the target lies below one that met it "
        f"(seed {bad[0]['seed']}: {bad[0]['note']}); bisection assumes attainment falls with load, so those "
        f"answers may be off ({rose} searches saw attainment rise with load somewhere)"
    )
