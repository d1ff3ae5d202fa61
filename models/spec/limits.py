"""The limits past which a run, a sweep or a search is refused before it starts: values that each look
valid (a 1 ns step, a week-long horizon, a load of 100, a million sidecars, 256 Streaming DiLoCo
fragments, one host core) can mean hours of simulation or gigabytes of memory. The run-size estimate
itself, a term per cost driver, is models.spec.runsize; here it meets the limits, and a refusal names
the scenario field behind its largest term. Every limit is an environment variable, so a user who
means it can raise it.
"""

from __future__ import annotations

import os
import re

from wadiloco.models.engine.prefix import MOONCAKE_BLOCK_TOKENS
from wadiloco.models.errors import InputError
from wadiloco.models.spec import runsize
from wadiloco.models.spec.runsize import Estimate, count_text

LIMITS = {  # name: (environment variable, default, what it bounds)
    "events": ("WADILOCO_MAX_EVENTS", 100_000_000, "simulation events per run"),
    "requests": ("WADILOCO_MAX_REQUESTS", 5_000_000, "requests per run"),
    "memory_mb": ("WADILOCO_MAX_MEMORY_MB", 2048, "MiB of memory per run"),
    "runs": ("WADILOCO_MAX_RUNS", 100_000, "runs in one sweep or capacity search"),
    "workers": ("WADILOCO_MAX_WORKERS", 64, "local worker processes"),
}


def limit(name: str) -> float:
    env, default, _ = LIMITS[name]
    raw = os.environ.get(env, "").strip()
    if not raw:
        return float(default)
    if not re.fullmatch(r"[0-9]+(\.[0-9]*)?([eE][+]?[0-9]+)?", raw) or not 0 < float(raw) < 1e30:
        raise InputError(f"${env}", "", f"must be a positive number (got {raw!r})")
    return float(raw)


def estimate(run) -> Estimate:
    """The estimate (models.spec.runsize) of a run: a RunSpec, or a Scenario resolved with its own policy."""
    from wadiloco.models.spec.resolve import resolve

    return runsize.estimate(resolve(run))


def check_run(run, file: object = None, prefix: str = "") -> Estimate:
    """The estimate of `run` (a RunSpec or a Scenario), or an InputError naming the field to change when
    it exceeds a limit."""
    est = estimate(run)
    file = run.source if file is None else file
    checks = (
        ("requests", est.counts["requests"], "requests"),
        ("memory_mb", est.memory_bytes / 2**20, max(est.bytes_by, key=est.bytes_by.get)),
        ("events", est.events, max(est.events_by, key=est.events_by.get)),
    )
    for name, value, term in checks:
        lim = limit(name)
        if value > lim:
            env, _, what = LIMITS[name]
            field = est.fields[term]
            change = {
                "requests": f"{field}, horizon_s or the fleet's size",
                "samples": f"{field} (the timeline has (horizon_s + drain_s) / monitor.sample_s samples)",
            }.get(term, field)
            raise InputError(
                file,
                f"{prefix}{field}",
                f"this run is too big: {est.describe()}; over the limit of {count_text(lim)} {what} (${env}). "
                f"Most of it comes from {est.terms[term].what}: change {change}, or raise ${env} if you mean it",
            )
    return est


def check_count(name: str, n: float, file: object, field: str, what: str, other: str = "") -> None:
    """An InputError if `n` (runs, workers) exceeds the limit `name`; `other` is a second field
    that multiplies it."""
    lim = limit(name)
    if n > lim:
        env = LIMITS[name][0]
        lower = f"{field} or {other}" if other else field
        msg = f"{what}: {count_text(n)}, over the limit of {count_text(lim)} (${env}); lower {lower}"
        raise InputError(file, field, msg)


def notes(sc, policy: str) -> list[str]:
    """Things a run will do that its author may not expect, said before it starts."""
    from wadiloco.models.policies import POLICIES

    out = []
    corridor_s = sc.merge.h_min * sc.training.step_time_s
    cls = POLICIES.get(policy)
    bound = cls is not None and cls.respects_corridor  # a replayed schedule merges where it says
    if policy != "no_sync" and bound and corridor_s >= sc.horizon_s:
        out.append(
            f"merge.h_min ({sc.merge.h_min} steps of {sc.training.step_time_s:g} s = {corridor_s:g} s) does not fit "
            f"in horizon_s ({sc.horizon_s:g} s): this run cannot merge"
        )
    wl = sc.workload if isinstance(sc.workload, dict) else {}
    mooncake = wl.get("format") == "mooncake" or str(wl.get("path", "")).endswith(".jsonl")
    if (sc.engine.prefix_cache or 0) >= MOONCAKE_BLOCK_TOKENS and sc.engine.shared_prefix is None and not mooncake:
        out.append(
            "engine.prefix_cache is on, but only a Mooncake trace's hash_ids or engine.shared_prefix give requests "
            "block hashes: every other prompt is unique, so nothing will hit (prefix_hit_rate 0)"
        )
    return out
