"""How big a run is, estimated from the resolved scenario before anything is built, and the limits
past which it is refused: values that each look valid (a 1 ns step, a week-long horizon, a load of
100, a million sidecars) can mean hours of simulation or gigabytes of memory.

The estimate counts what the simulator does per item, with costs measured on this project's
machine class (2 cores, CPython 3.11): a request is about 3 events and 250 bytes; an island's
inner step 2 events and 60 bytes; a monitor sample 1 event plus half an event per sidecar it
reads, one per island whose next decision it looks ahead to and a tenth per host (measured: 4,096
hosts sampled every 10 ms cost 3.4 ms a sample in 64 islands, 5.3 ms in 256), and 250 bytes; a
sidecar or host about 50 events and 10 kB to build; a merge about 10 events per host. At roughly
10 us per event, 1e8 events is a quarter of an hour. Every limit is an environment variable, so a
user who means it can raise it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from wadiloco.models.engine.prefix import MOONCAKE_BLOCK_TOKENS
from wadiloco.models.errors import InputError

LIMITS = {  # name: (environment variable, default, what it bounds)
    "events": ("WADILOCO_MAX_EVENTS", 100_000_000, "simulation events per run"),
    "requests": ("WADILOCO_MAX_REQUESTS", 5_000_000, "requests per run"),
    "memory_mb": ("WADILOCO_MAX_MEMORY_MB", 2048, "MiB of memory per run"),
    "runs": ("WADILOCO_MAX_RUNS", 100_000, "runs in one sweep or capacity search"),
    "workers": ("WADILOCO_MAX_WORKERS", 64, "local worker processes"),
}
BASE_BYTES = 100e6  # the interpreter, numpy, pandas and the simulator's code


def limit(name: str) -> float:
    env, default, _ = LIMITS[name]
    raw = os.environ.get(env, "").strip()
    if not raw:
        return float(default)
    if not re.fullmatch(r"[0-9]+(\.[0-9]*)?([eE][+]?[0-9]+)?", raw) or not 0 < float(raw) < 1e30:
        raise InputError(f"${env}", "", f"must be a positive number (got {raw!r})")
    return float(raw)


@dataclass(frozen=True)
class Estimate:
    """What one run of a scenario does, roughly: counts of each kind of work, and the events and
    bytes each kind costs."""

    counts: dict[str, float]  # requests, island_steps, samples, components (sidecars + hosts), merges
    events_by: dict[str, float]
    bytes_by: dict[str, float]
    fields: dict[str, str]  # the scenario field that sets each count

    @property
    def events(self) -> float:
        return sum(self.events_by.values())

    @property
    def memory_bytes(self) -> float:
        return BASE_BYTES + sum(self.bytes_by.values())

    def describe(self) -> str:
        c = self.counts
        return (
            f"about {_g(c['requests'])} requests, {_g(c['island_steps'])} island steps, {_g(c['samples'])} "
            f"monitor samples, {_g(c['components'])} sidecars and hosts, {_g(c['merges'])} merges at most: "
            f"{_g(self.events)} events, {self.memory_bytes / 2**20:,.0f} MiB"
        )


def _g(x: float) -> str:
    return f"{x:,.0f}" if x < 1e7 else f"{x:.3g}"


def expected_requests(sc, workload) -> tuple[float, str]:
    """Requests over the horizon, fleet-wide, and the field that sets them; (0, "") if unknown."""
    n, h = sc.fleet.n_sidecars, sc.horizon_s
    trace = getattr(workload, "trace", None) if hasattr(workload, "cycle_s") else None
    if trace is not None and getattr(workload, "load", None) is None:
        t = trace.t[trace.t >= workload.time_offset_s] - workload.time_offset_s
        window = h * workload.rate_scale
        if workload.loop and len(t):
            cycle = max(workload.cycle_s(), 1e-300)
            return len(t) * window / cycle, "workload.rate_scale"
        return float((t < window).sum()), "workload.rate_scale"
    load = getattr(workload, "load", None)
    if load is None:
        return 0.0, ""
    if trace is not None:
        mp, mo = float(trace.prompt.mean()), float(trace.output.mean())
    elif hasattr(workload, "tokens"):
        mp, mo = workload.tokens.prompt.clipped_mean(), workload.tokens.output.clipped_mean()
    else:
        return 0.0, ""
    return load * _capacity(sc, mp, mo) * n * h, "workload.load"


def _capacity(sc, mean_prompt: float, mean_output: float) -> float:
    from wadiloco.models.engine.capacity import sidecar_capacity_rps
    from wadiloco.models.engine.latency import default_latency
    from wadiloco.models.training.interference import default_weights

    e = sc.engine
    host_s = e.host_overhead_s + (0.0 if e.cuda_graphs else default_weights().eager_host_s)
    cap = sidecar_capacity_rps(
        default_latency(), e.max_num_seqs, host_s, mean_prompt, mean_output, e.max_num_batched_tokens
    )
    return cap if math.isfinite(cap) and cap > 0 else 0.0


def estimate(sc, workload=None) -> Estimate:
    """The estimate for scenario `sc` (models.spec.scenario.Scenario); `workload` is its parsed workload
    (models.workload.kinds.parse_workload), parsed here if not given."""
    if workload is None:
        from wadiloco.models.workload.kinds import parse_workload

        workload = parse_workload(sc.workload, sc.source, sc.base_dir)
    f = sc.fleet
    requests, req_field = expected_requests(sc, workload)
    rounds = sc.horizon_s / sc.training.step_time_s
    c = {
        "requests": requests,
        "island_steps": f.islands * rounds,
        "samples": (sc.horizon_s + sc.drain_s) / sc.monitor.sample_s,
        "components": float(f.n_sidecars + f.n_hosts),
        "merges": rounds / sc.merge.h_min,
    }
    events = {
        "requests": 3.0 * c["requests"],
        "island_steps": 2.0 * c["island_steps"],
        "samples": (1.0 + f.n_sidecars / 2 + f.islands + f.n_hosts / 10) * c["samples"],
        "components": 50.0 * c["components"],
        "merges": 10.0 * f.n_hosts * c["merges"],
    }
    per_byte = {"requests": 250.0, "island_steps": 60.0, "samples": 250.0, "components": 10e3, "merges": 200.0}
    fields = {
        "requests": req_field or "horizon_s",
        "island_steps": "training.step_time_s",
        "samples": _samples_field(sc),
        "components": "fleet",
        "merges": "merge.h_min",
    }
    return Estimate(c, events, {k: per_byte[k] * v for k, v in c.items()}, fields)


def _samples_field(sc) -> str:
    """The field that makes the timeline long: a sampling period far below its 1 s default, or a
    drain far past the horizon."""
    by_period = 1.0 / sc.monitor.sample_s
    by_drain = (sc.horizon_s + sc.drain_s) / (2 * sc.horizon_s)
    return "drain_s" if by_drain > by_period else "monitor.sample_s"


def check_run(sc, workload=None, file: object = None, prefix: str = "") -> Estimate:
    """The estimate, or an InputError naming the field to change when it exceeds a limit."""
    est = estimate(sc, workload)
    file = sc.source if file is None else file
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
                f"this run is too big: {est.describe()}; over the limit of {_g(lim)} {what} (${env}). "
                f"Most of it comes from {term.replace('_', ' ')}: change {change}, or raise ${env} if you mean it",
            )
    return est


def check_count(name: str, n: float, file: object, field: str, what: str, other: str = "") -> None:
    """An InputError if `n` (runs, workers) exceeds the limit `name`; `other` is a second field
    that multiplies it."""
    lim = limit(name)
    if n > lim:
        env = LIMITS[name][0]
        lower = f"{field} or {other}" if other else field
        raise InputError(file, field, f"{what}: {_g(n)}, over the limit of {_g(lim)} (${env}); lower {lower}")


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
