"""One simulated fleet, built from a resolved scenario and run once: the only place SimPy objects meet.

Resources live in fabrics (sim.resources): one for the network and checkpoint storage, one per
host resource. Sidecar engines (sim.engine), islands (sim.training), merge phases (sim.merge) and
a GPU co-tenant if the scenario has one (sim.cotenant) are the jobs on them; the monitor
(sim.monitor) samples them and builds what the policy sees; the
lookahead bound (sim.lookahead) says how far engines may run ahead of the clock. Each part gets
the few others it calls, never the fleet.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import simpy

from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.engine.tape import Recorder, Replay, Tape
from wadiloco.models.policies.base import WhatIf
from wadiloco.models.policies.planned import PlannedSteps
from wadiloco.models.results import invariants as inv
from wadiloco.models.results.metrics import add_labels, censored_e2e, request_table, summarize, testbed_figures
from wadiloco.models.spec.load import Resolved, resolve
from wadiloco.models.spec.scenario import Scenario
from wadiloco.models.training.progress import ProgressModel
from wadiloco.models.workload.clients import load_hash
from wadiloco.models.workload.kinds import Arrivals, arrivals_hash
from wadiloco.sim.build import (
    check_clients,
    checks_on,
    client_column,
    engine_host_s,
    engine_latency,
    kv_summary,
    make_arrivals,
    make_clients,
    make_policy,
    make_sidecars,
    merge_memory_hook,
    prefix_summary,
)
from wadiloco.sim.cotenant import Cotenant
from wadiloco.sim.disagg import make_disagg
from wadiloco.sim.gpushare import GpuShare
from wadiloco.sim.kvstore import make_remote_kv
from wadiloco.sim.lookahead import LookaheadBound
from wadiloco.sim.merge import MergeExecutor, resolve_weights
from wadiloco.sim.monitor import Monitor
from wadiloco.sim.resources import Resources
from wadiloco.sim.routing import make_router
from wadiloco.sim.training import MergeRecord, Trainer


@dataclass
class RunResult:
    scenario: str
    policy: str
    seed: int
    draw: int
    summary: dict[str, Any]
    requests: dict[str, np.ndarray] = field(repr=False)
    merges: list[MergeRecord] = field(repr=False)
    timeline: Mapping[str, np.ndarray] = field(repr=False)  # filled when first read (sim.monitor Timeline)
    decisions: list[tuple[int, float, bool]] = field(repr=False)
    scenario_digest: str = ""  # Scenario.digest() of what ran
    policy_params: dict[str, Any] = field(default_factory=dict)  # the policy's params, defaults filled in
    cotenant_windows: list[tuple[float, float]] = field(default_factory=list, repr=False)  # (on, off) as run


class Fleet:
    """The parts of one run, wired: resources, sidecars, policy, merge executor, trainer, monitor
    and lookahead bound. Built from a `Resolved` scenario as it is; `run()` once."""

    def __init__(
        self,
        r: Resolved,
        seed: int,
        *,
        draw: int = 0,
        reference_merges: int | None = None,
        reference_steps: int | None = None,
        check: bool | None = None,
        arrivals: list[Arrivals] | None = None,
        latency: LatencyModel | None = None,
        lookahead: bool = True,
        plan_ahead: bool = True,
    ):
        """`arrivals` replaces the workload (metamorphic tests); `lookahead=False`: same results, slower;
        `plan_ahead=False`: ask even a planned policy (Policy.next_merge) at every step, with an Observation."""
        self.r = r
        self.sc = sc = r.scenario
        self.seed, self.draw = int(seed), draw
        self.check = checks_on(sc, check)
        self.env = env = simpy.Environment()
        self.lat = engine_latency(sc, latency)
        w = resolve_weights(sc)
        self.host_s = engine_host_s(sc, w)
        self.arrivals, self.capacity_rps = make_arrivals(r, self.seed, self.lat, self.host_s, arrivals)
        self.clients = make_clients(r, self.seed) if arrivals is None else None
        self.res = Resources(env, sc, self.check, self.seed)
        self.bound = bound = LookaheadBound(sc.horizon_s + sc.drain_s, lookahead)
        self.gpushare = gs = GpuShare(sc, w, self.res.hosts)
        self.sidecars = self._make_sidecars(bound)
        self.router = make_router(sc, self.seed, env, self.sidecars, self.arrivals, bound, self.clients)
        t = sc.training
        self.progress = ProgressModel(t.params, t.tokens_per_step, sc.fleet.islands, t.initial_loss_tokens)
        self._given = {"arrivals": arrivals, "latency": latency, "lookahead": lookahead, "plan_ahead": plan_ahead}
        self._what_if_tapes: list[Tape | None] | None = None
        self.policy = make_policy(r, self.seed, draw, reference_merges, reference_steps, self.arrivals, self.what_if)
        # a policy that answers from the step count alone is asked without an Observation (`decide`)
        self.planned = plan_ahead and self.policy.next_merge(0, 0) is not None
        self._recorders: list[Recorder] = []  # share(None): the engines' busy periods, as they run
        self.merge = MergeExecutor(env, sc, w, self.res, bound.changed, gs)
        self.merge.bound_changed = merge_memory_hook(self.sidecars, lambda: self.merge.active, bound.changed)
        for f in self.res.fabrics:  # while merge work is on the links, its next completion bounds the engines
            f.timer_moved = self.merge.timer_moved
        ct = r.cotenant
        gpus = [self.sidecars[i].gpu for i in ct.sidecars] if ct is not None else []
        self.cotenant = Cotenant(env, ct, gpus, bound.changed) if ct is not None else None
        self.trainer = self._make_trainer(bound, gs)
        self.monitor = Monitor(
            env,
            sc,
            self.sidecars,
            self.res,
            self.trainer.view,
            self.progress,
            capacity_rps=self.capacity_rps,
            merging=lambda: self.merge.active,
            bound_changed=bound.changed,
            check=self.check,
        )
        # a running merge first: it lifts the bound without asking the others
        bound.watch(self.merge.next_work_at, self.trainer.next_decision_at, self.monitor.next_sample_at)
        if self.cotenant is not None:
            bound.watch(self.cotenant.next_switch_at)
        if gs.active:  # islands stopping at the horizon release the GPU and their threads
            bound.watch(self.trainer.next_stop_at)
        if sc.fleet.host_cores is not None:
            for hr in self.res.hosts:
                hr.cpu.bound_changed = bound.changed
            bound.watch(self.res.next_preemption_at)
        self.monitor.start()  # before the islands: same-instant events keep their order
        self.trainer.start()
        if self.cotenant is not None:
            self.cotenant.start()

    def what_if(self, steps) -> WhatIf:
        """This run (scenario, seed, draw, and whatever arrivals or latency model it was given) with
        merges at exactly `steps`, simulated in full on a fleet of its own: an oracle's question."""
        r = replace(self.r, policy=PlannedSteps, params=PlannedSteps.Params(steps=tuple(int(k) for k in steps)))
        fleet = Fleet(r, self.seed, draw=self.draw, check=self.check, **self._given)
        if fleet.shareable():  # the busy periods every what-if shares with the first (models.engine.tape): same results
            fleet.share(self._what_if_tapes)
        res = fleet.run()
        if self._what_if_tapes is None and fleet.shareable():
            self._what_if_tapes = fleet.tapes()
        e2e = censored_e2e(res.requests["e2e"], res.requests["arrival"], float(res.summary["sim_time_s"]))
        dur = [m.end - m.decided_at for m in res.merges]  # how long each merge held training
        return WhatIf(
            int(res.summary["slo_violations"]),
            float(e2e.sum()),
            tuple(m.step for m in res.merges),
            float(np.mean(dur)) if dur else 0.0,
        )

    def _make_trainer(self, bound: LookaheadBound, gs: GpuShare) -> Trainer:
        """The islands: they ask the policy (`decide`; a planned one only about its next merge), run
        merge phases, and bank merges (a `merges` co-tenant also opens a window then)."""
        sc, ct = self.sc, self.r.cotenant
        merged = self._merged if ct is not None and ct.timetable.merge_window_s is not None else None
        return Trainer(
            self.env,
            sc.training,
            sc.fleet.islands,
            sc.horizon_s,
            self.seed,
            decide=self.decide,
            run_phase=self.merge.run_phase,
            bound_changed=bound.changed,
            merged=merged or self.progress.record_merge,
            phases=sc.merge.phases,
            stream_round=self._stream_round if sc.merge.fragments > 1 else None,
            computing=gs.computing if gs.active else None,
            plan=self.policy.next_merge if self.planned else None,
        )

    # -- sharing busy periods across runs of a seed (models.engine.tape) --------------------------------
    def shareable(self) -> bool:
        """Whether these engines may record or replay tapes: open loop, unrouted, not fed from
        outside, no KV pool, prefix cache or iteration log (models.engine.tape)."""
        return (
            self.fed is None
            and self.router is None
            and self.clients is None
            and all(s.core.kv is None and s.core.px is None and s.core.log is None for s in self.sidecars)
        )

    def share(self, tapes: list[Tape] | None) -> bool:
        """Before run(): record every engine's busy periods (`tapes` None; then `tapes()` after the
        run), or replay a baseline run's. False, and nothing attached, if this fleet may not or the
        tapes were recorded on other requests."""
        if not self.shareable():
            return False
        cores = [s.core for s in self.sidecars]
        if tapes is None:
            self._recorders = [Recorder() for _ in cores]
            for c, rec in zip(cores, self._recorders):
                c.tape = rec
            return True
        if len(tapes) != len(cores):
            return False
        for c, t in zip(cores, tapes):
            if t is not None and t.fits(c):  # (an engine whose baseline ran contended has none)
                c.tape = Replay(t)
        return True

    def tapes(self) -> list[Tape | None]:
        """After a recording run: each engine's tape (None where it ran contended)."""
        return [rec.tape(s.core) for rec, s in zip(self._recorders, self.sidecars)]

    def _make_sidecars(self, bound: LookaheadBound) -> list:
        """The engines: one per sidecar, or engines fed from outside (`self.fed`, None otherwise): the
        prefill and decode ones of `disagg:` (sim.disagg), or those whose caches pool (`remote_kv:`,
        sim.kvstore)."""
        env, sc, lat, hs = self.env, self.sc, self.lat, self.host_s
        self.fed = make_disagg(env, sc, self.arrivals, lat, hs, self.res, bound, self.clients)
        if self.fed is None:
            self.fed = make_remote_kv(env, sc, self.arrivals, lat, hs, self.res, bound, self.clients)
        if self.fed is not None:
            return self.fed.sidecars
        return make_sidecars(env, sc, self.arrivals, lat, hs, self.res.hosts, bound.lookahead, self.clients)

    def _stream_round(self, rec: MergeRecord):
        """A Streaming DiLoCo round (merge.fragments > 1): the fragments' phases, no barrier."""
        return self.merge.stream_round(rec, self.sc.merge.phases, self.sc.training.step_time_s)

    def _merged(self, steps: int) -> None:
        """A merge was banked: the progress model records it, a `merges` co-tenant opens a window."""
        self.progress.record_merge(steps)
        self.cotenant.merge_ended()

    def decide(self, step: int) -> bool:
        """The policy's answer for inner step `step`, from what the monitor observes now; or, for a
        planned policy (Policy.next_merge), from the step count, reading nothing of the engines,
        which may then have run ahead of now (tests/test_policies.py: it equals `decide`'s)."""
        if self.planned:
            return self.policy.next_merge(step - 1, self.trainer.last_merge_step) == step
        return bool(self.policy.decide(self.monitor.observe(step)))

    def run(self) -> RunResult:
        t0 = time.perf_counter()
        self.bound.start()
        self.env.run(until=self.bound.end)
        if self.router is not None:  # each sidecar's requests are what the router gave it
            self.arrivals = self.router.delivered()
        wall = time.perf_counter() - t0
        merges = self.trainer.completed_merges()
        slo = self.sc.slo
        req = request_table(self._per_sidecar(), slo.ttft_s, slo.tpot_s, merges, slo.e2e_s)
        if self.r.labels is not None:
            add_labels(req, self.r.labels.columns(req["arrival"], np.array([m.end for m in merges], dtype=float)))
        summary = self._summary(req, merges, wall)
        if self.check:
            self.check_invariants(req, merges)
        return RunResult(
            self.sc.name,
            self.r.policy_name,
            self.seed,
            self.draw,
            summary,
            req,
            merges,
            self.monitor.lazy_timeline(),
            list(self.trainer.decision_log),
            self.sc.digest(),
            self.r.params.model_dump(mode="json"),
            self.cotenant.windows() if self.cotenant is not None else [],
        )

    def _per_sidecar(self) -> list[tuple]:
        """request_table's input: the arrivals' own arrays (no per-request copies: this table is the
        run's peak of memory); a closed loop's requests are the engines' own, with their client's
        columns (models.workload.clients: the batch or user, and when the client saw each request done);
        engines fed from outside give theirs (sim.disagg: each request once, on its prefill sidecar)."""
        if self.fed is not None:
            return self.fed.per_sidecar()
        if self.clients is None:
            return [
                (
                    s.t_arr,
                    np.asarray(a.prompt, dtype=np.int64),
                    np.asarray(a.output, dtype=np.int64),
                    s.admitted,
                    s.first_token,
                    s.finish,
                )
                for s, a in zip(self.sidecars, self.arrivals)
            ]
        out = []
        for s, client in zip(self.sidecars, self.clients):
            c = s.core
            tag = np.array(c.tag, dtype=np.int64)
            extra = {client_column(client): tag, "done": client.done_times(tag)}
            t, p, o = np.array(c.t_arr, dtype=np.float64), np.array(c.prompt, np.int64), np.array(c.output, np.int64)
            out.append((t, p, o, *s.results(), extra))
        return out

    def _summary(self, req: dict[str, np.ndarray], merges: list[MergeRecord], wall: float) -> dict[str, Any]:
        tr = self.trainer
        final_step = max(tr.island_step) if tr.island_step else 0
        summary = summarize(req, merges, self.sc.slo.ttft_s, self.sc.slo.tpot_s, self.sc.slo.e2e_s)
        arrived = arrivals_hash(self.arrivals if self.clients is None else self._created(req))
        summary.update(
            {
                "scenario": self.sc.name,
                "policy": self.r.policy_name,
                "seed": self.seed,
                "draw": self.draw,
                "merge_steps": [m.step for m in merges],
                "final_loss": self.progress.final_loss(final_step - tr.last_merge_step if tr.island_step else 0),
                "inner_steps": final_step,
                "sim_time_s": float(self.env.now),
                "wall_time_s": wall,
                "arrivals_hash": arrived,
                "load_hash": arrived if self.clients is None else load_hash(self.clients),
                "capacity_rps_per_sidecar": self.capacity_rps,
                "engine_iterations": int(sum(s.iterations for s in self.sidecars)),
                "contended_iterations": int(sum(s.contended_iterations for s in self.sidecars)),
                "peak_link_load": self.res.peak_load(),
            }
        )
        summary.update(kv_summary(self.sidecars))  # only with KV pools (engine.kv_blocks): their keys
        summary.update(prefix_summary(self.sidecars))  # only with prefix caches (engine.prefix_cache)
        if self.router is not None:  # only then (router.name not static)
            summary["router"] = self.router.summary()
        if self.fed is not None:  # only then (disagg:, remote_kv:): the KV hand-offs or fetches
            summary[self.fed.key] = self.fed.summary()
        if self.r.labels is not None:  # only then (testbed_labels:): the testbed's own figures
            summary["testbed"] = testbed_figures(req, len(merges))
        if getattr(self.policy, "search", None):  # only an oracle that searched (sim_oracle): what it did
            summary["oracle_search"] = dict(self.policy.search)
        if self.cotenant is not None:  # only then: the default summary keeps its keys
            wins = self.cotenant.windows()
            summary["cotenant"] = {
                "weight": self.cotenant.plan.weight,
                "windows": len(wins),
                "on_s": float(sum(min(b, self.env.now) - a for a, b in wins)),
            }
        return summary

    def _created(self, req: dict[str, np.ndarray]) -> list[Arrivals]:
        """A closed loop's requests as arrivals: what its runs are compared by (they differ by policy)."""
        by = [req["sidecar"] == s for s in range(len(self.sidecars))]
        return [Arrivals(req["arrival"][m], req["prompt"][m], req["output"][m]) for m in by]

    def check_invariants(self, req: dict[str, np.ndarray], merges: list[MergeRecord]) -> None:
        counts = [len(a.t) for a in self.arrivals] if self.clients is None else [c.created for c in self.clients]
        inv.check_requests(req, sum(counts))
        # (as int: a fleet with no sidecars has an empty request table, whose columns are float)
        done = np.bincount(req["sidecar"][~np.isnan(req["finish"])].astype(np.int64), minlength=len(self.sidecars))
        for i, s in enumerate(self.sidecars if self.fed is None else ()):
            inv.check_conservation(i, s.counts(self.env.now), counts[i], int(done[i]))
            inv.check_kv(i, s.core)
        if self.fed is not None:  # each engine's own requests (dealt to a prefill, handed to a decoder, ...)
            self.fed.check(self.env.now)
        if self.clients is not None:
            check_clients(req, self.clients)
        inv.check_merges(merges)
        inv.check_peak_load(self.res.peak_load())
        cls = self.r.policy
        if cls.respects_corridor:
            final_step = max(self.trainer.island_step)
            inv.check_corridor([m.step for m in merges], self.sc.merge.h_min, self.sc.merge.h_max, final_step)
        if not cls.oracle and self.policy.future_seen:
            raise inv.InvariantError("an online policy was given the future")


def simulate(
    sc: Scenario | Resolved, seed: int = 0, policy: str | None = None, params: dict | None = None, **kw
) -> RunResult:
    """Run `sc` once with `policy` (default: its own; models.spec.load.policy_choice picks params)."""
    return Fleet(resolve(sc, policy, params), seed, **kw).run()
