"""A run's result, built in one place: the request table, the summary and the invariants check.

The fleet (sim.fleet) hands over what the run produced: each sidecar's requests (`per_sidecar`, the
input of models.results.metrics.request_table), the merges, the run's own figures (`figures`: who
ran, the training progress, times, hashes, engine and link figures) and its *extras*: the parts a
scenario may add beyond the core fleet (KV pools, prefix caches, a router, disaggregated or pooled
engines, a GPU co-tenant, closed-loop clients, an oracle's search, and the scenario blocks a plug-in
resolves, models.results.blocks: the testbed's labels). Each extra adds its request-table columns,
summary keys and invariants through one small protocol (`Extra`); the core keys never change with
them. The summary's keys come in a fixed order: the request figures (metrics.summarize), the run's
figures, then each extra's, in the order the fleet lists them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from wadiloco.models.results import invariants as inv
from wadiloco.models.results.metrics import request_table, summarize
from wadiloco.models.spec.run import SLOSpec
from wadiloco.models.workload.clients import tag_column

Table = dict[str, np.ndarray]


class Extra(Protocol):
    """A part of a run that adds to its result. Every method may add nothing (`NoExtra`'s)."""

    def columns(self, req: Table, merges: Sequence) -> Mapping[str, np.ndarray]:
        """Request-table columns to add, in the table's row order, once the table is built."""
        ...

    def summary(self, req: Table, merges: Sequence) -> Mapping[str, Any]:
        """Summary keys to add (a block of its own under one key, or flat keys)."""
        ...

    def check(self, req: Table, merges: Sequence) -> None:
        """Its invariants (models.results.invariants): raise InvariantError."""
        ...


class NoExtra:
    """The protocol's do-nothing methods, for extras that add only some of the three."""

    def columns(self, req: Table, merges: Sequence) -> Mapping[str, np.ndarray]:
        return {}

    def summary(self, req: Table, merges: Sequence) -> Mapping[str, Any]:
        return {}

    def check(self, req: Table, merges: Sequence) -> None:
        return None


def build_requests(per_sidecar: list[tuple], merges: Sequence, slo: SLOSpec, extras: Sequence[Extra]) -> Table:
    """The request table (metrics.request_table) with every extra's columns after the core ones."""
    req = request_table(per_sidecar, slo.ttft_s, slo.tpot_s, merges, slo.e2e_s)
    n = len(req["arrival"])
    for x in extras:
        for k, v in x.columns(req, merges).items():
            if k in req or len(v) != n:
                raise ValueError(f"column {k}: {len(v)} values for {n} requests, or a name the table has")
            req[k] = np.asarray(v)
    return req


def build_summary(
    req: Table, merges: Sequence, slo: SLOSpec, figures: Mapping[str, Any], extras: Sequence[Extra]
) -> dict[str, Any]:
    """The run's summary: the request figures, the run's own figures, then every extra's keys."""
    summary = summarize(req, merges, slo.ttft_s, slo.tpot_s, slo.e2e_s)
    summary.update(figures)
    for x in extras:
        summary.update(x.summary(req, merges))
    return summary


def check_run(req: Table, merges: Sequence, arrived: int, peak_load: float, extras: Sequence[Extra]) -> None:
    """Every invariant of the run: each request's, the merges', the links' peak load, then each extra's."""
    inv.check_requests(req, arrived)
    inv.check_merges(merges)
    inv.check_peak_load(peak_load)
    for x in extras:
        x.check(req, merges)


def merge_rows(merges: Sequence) -> list[dict[str, Any]]:
    """One row per merge (merges.csv): when it was decided, started and ended, whether it was still
    running when the run ended (`unfinished`: its end and its last phase's end are the run's), and
    each phase's span."""
    return [
        {
            "merge_index": m.index,
            "step": m.step,
            "decided_at_s": m.decided_at,
            "start_s": m.start,
            "end_s": m.end,
            "duration_s": m.end - m.start,
            "unfinished": m.unfinished,
            **{f"{k}_start_s": v[0] for k, v in m.phases.items()},
            **{f"{k}_end_s": v[1] for k, v in m.phases.items()},
        }
        for m in merges
    ]


@dataclass
class RunResult:
    scenario: str
    policy: str
    seed: int
    draw: int
    summary: dict[str, Any]
    requests: dict[str, np.ndarray] = field(repr=False)
    merges: list = field(repr=False)  # sim.training.MergeRecord; the last may be `unfinished` (running at the end)
    timeline: Mapping[str, np.ndarray] = field(repr=False)  # filled when first read (sim.monitor Timeline)
    decisions: list[tuple[int, float, bool]] = field(repr=False)
    scenario_digest: str = ""  # Scenario.digest() of what ran
    policy_params: dict[str, Any] = field(default_factory=dict)  # the policy's params, defaults filled in
    cotenant_windows: list[tuple[float, float]] = field(default_factory=list, repr=False)  # (on, off) as run
    # where merges act through a co-tenant's window after each merge (a `merges` timetable: the testbed
    # twin), each merge's window (models.cotenant CotenantPlan.merge_window); None otherwise
    merge_windows: list[tuple[float, float]] | None = field(default=None, repr=False)

    @property
    def completed_merges(self) -> list:
        """The merges that finished (`merges` also holds one still running at the end, `unfinished`)."""
        return [m for m in self.merges if not m.unfinished]

    def record(self) -> dict[str, Any]:
        """The summary with what ran, exactly: the scenario's digest and the policy's params (summary.json)."""
        return {**self.summary, "scenario_digest": self.scenario_digest, "policy_params": self.policy_params}


# ---- extras without a SimPy part ------------------------------------------------------------------------


class KVPools(NoExtra):
    """The engines' KV-cache pools (models.engine.kv; none without engine.kv_blocks or gpu_memory_gb):
    preemptions and requests rejected as too long (summed), the peak usage (the fullest pool after an
    iteration's allocations) and the mean usage (blocks in use over blocks available, summed over every
    engine's iterations); swapped blocks with swap preemption."""

    def __init__(self, pools: list):
        self.pools = pools

    def summary(self, req: Table, merges: Sequence) -> dict[str, Any]:
        pools = self.pools
        if not pools:
            return {}
        cap = sum(p.sum_cap for p in pools)
        swap = {"swap_blocks": sum(p.copied for p in pools)} if any(p.swap for p in pools) else {}
        return {
            **swap,
            "preemptions": sum(p.preemptions for p in pools),
            "rejected_too_long": sum(p.rejected for p in pools),
            "kv_usage_peak": max(p.peak for p in pools),
            "kv_usage_mean": sum(p.sum_used for p in pools) / cap if cap else 0.0,
        }


class PrefixCaches(NoExtra):
    """prefix_hit_rate (only with prefix caches, models.engine.prefix): prompt tokens served from the
    caches over prompt tokens, at the requests' first admissions, fleet-wide."""

    def __init__(self, caches: list):
        self.caches = caches

    def summary(self, req: Table, merges: Sequence) -> dict[str, Any]:
        if not self.caches:
            return {}
        prompt = sum(c.prompt_tokens for c in self.caches)
        return {"prefix_hit_rate": sum(c.hit_tokens for c in self.caches) / prompt if prompt else 0.0}


class Engines(NoExtra):
    """Each engine's own invariants: its requests conserved (arrived = waiting + running + finished)
    and its KV pool's blocks accounted for. `counts[i]`: how many requests engine i was given."""

    def __init__(self, sidecars: list, counts: list[int], now: float):
        self.sidecars, self.counts, self.now = sidecars, counts, now

    def check(self, req: Table, merges: Sequence) -> None:
        # (as int: a fleet with no sidecars has an empty request table, whose columns are float)
        done = np.bincount(req["sidecar"][~np.isnan(req["finish"])].astype(np.int64), minlength=len(self.sidecars))
        for i, s in enumerate(self.sidecars):
            inv.check_conservation(i, s.counts(self.now), self.counts[i], int(done[i]))
            inv.check_kv(i, s.core)


class Clients(NoExtra):
    """Closed-loop clients (models.workload.clients): each sidecar's client's invariants on its rows,
    by the tag column it added (`batch` or `user`)."""

    def __init__(self, clients: list):
        self.clients = clients

    def check(self, req: Table, merges: Sequence) -> None:
        for s, client in enumerate(self.clients):
            mine = req["sidecar"] == s
            client.check(req["arrival"][mine], req["finish"][mine], req[tag_column(client)][mine])


class PolicyRun(NoExtra):
    """What the policy adds: an oracle's search (sim_oracle: what it did), and the policy's invariants:
    its merges inside the corridor (unless it is a control that need not be), and no online policy
    shown the future."""

    def __init__(self, policy, cls, h_min: int, h_max: int, final_step: int):
        self.policy, self.cls, self.h_min, self.h_max, self.final_step = policy, cls, h_min, h_max, final_step

    def summary(self, req: Table, merges: Sequence) -> dict[str, Any]:
        search = getattr(self.policy, "search", None)
        return {"oracle_search": dict(search)} if search else {}

    def check(self, req: Table, merges: Sequence) -> None:
        if self.cls.respects_corridor:
            inv.check_corridor([m.step for m in merges], self.h_min, self.h_max, self.final_step)
        if not self.cls.oracle and self.policy.future_seen:
            raise inv.InvariantError("an online policy was given the future")
