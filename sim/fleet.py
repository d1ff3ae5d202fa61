"""One simulated fleet, built from a resolved scenario and run once: the only place SimPy objects meet.

Resources live in fabrics (sim.resources): one for the network and checkpoint storage, one per
host resource. Sidecar engines (sim.engine), islands (sim.training), merge phases (sim.merge) and
a GPU co-tenant if the scenario has one (sim.cotenant) are the jobs on them; the monitor
(sim.monitor) samples them and builds what the policy sees; the lookahead bound (sim.lookahead)
says how far engines may run ahead of the clock, from the sources registered in one place
(`_lookahead_sources`). Each part gets its own sub-spec (models.spec.run) and the few others it
calls, never the fleet or the scenario.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import simpy

from wadiloco.models.engine.tape import Recorder, Replay, Tape
from wadiloco.models.policies.base import WhatIf
from wadiloco.models.policies.planned import PlannedSteps
from wadiloco.models.results.metrics import censored_e2e
from wadiloco.models.results.run import (
    Clients,
    EngineLimits,
    Engines,
    KVPools,
    PolicyRun,
    PrefixCaches,
    RunResult,
    build_requests,
    build_summary,
    check_run,
)
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.spec.run import RunSpec
from wadiloco.models.training.progress import ProgressModel
from wadiloco.models.workload.clients import load_hash, tag_column
from wadiloco.models.workload.kinds import Arrivals, arrivals_hash
from wadiloco.sim.build import checks_on, make_arrivals, make_clients, make_policy, make_sidecars, merge_memory
from wadiloco.sim.cotenant import Cotenant
from wadiloco.sim.disagg import make_disagg
from wadiloco.sim.gpushare import GpuShare
from wadiloco.sim.kvstore import make_remote_kv
from wadiloco.sim.lookahead import LookaheadBound
from wadiloco.sim.merge import MergeExecutor
from wadiloco.sim.monitor import Monitor
from wadiloco.sim.resources import Resources
from wadiloco.sim.routing import make_router
from wadiloco.sim.training import MergeRecord, Trainer


class Fleet:
    """The parts of one run, wired: resources, sidecars, policy, merge executor, trainer, monitor
    and lookahead bound. Built from a run's spec (models.spec.run.RunSpec) as it is; `run()` once."""

    def __init__(
        self,
        spec: RunSpec,
        seed: int,
        *,
        draw: int = 0,
        reference_merges: int | None = None,
        reference_steps: int | None = None,
        check: bool | None = None,
        arrivals: list[Arrivals] | None = None,
        latency=None,
        lookahead: bool = True,
        plan_ahead: bool = True,
    ):
        """`arrivals` replaces the workload and `latency` the GPU step's law (metamorphic tests);
        `lookahead=False`: same results, slower; `plan_ahead=False`: ask even a planned policy
        (Policy.next_merge) at every step, with an Observation."""
        self.spec = spec = spec if latency is None else spec.with_latency(latency)
        self.seed, self.draw = int(seed), draw
        self.check = checks_on(spec.monitor.check_invariants, check)
        self.env = env = simpy.Environment()
        self.arrivals, self.capacity_rps = make_arrivals(spec, self.seed, arrivals)
        self.clients = make_clients(spec, self.seed) if arrivals is None else None
        self.res = Resources(env, spec.fleet, self.check, self.seed)
        self.bound = LookaheadBound(spec.end_s, lookahead)
        self.gpushare = GpuShare(spec.fleet, spec.merge.weights, self.res.hosts)
        self.fed, self.sidecars = self._make_sidecars()
        self.router = make_router(spec.router, self.seed, env, self.sidecars, self.arrivals)
        t = spec.training
        self.progress = ProgressModel(t.params, t.tokens_per_step, t.islands, t.initial_loss_tokens)
        self._given = {"arrivals": arrivals, "lookahead": lookahead, "plan_ahead": plan_ahead}
        self._what_if_tapes: list[Tape | None] | None = None
        refs = (reference_merges, reference_steps)
        self.policy = make_policy(spec.policy, self.seed, draw, *refs, self.arrivals, self.what_if)
        # a policy that answers from the step count alone is asked without an Observation (`decide`)
        self.planned = plan_ahead and self.policy.next_merge(0, 0) is not None
        self._recorders: list[Recorder] = []  # share(None): the engines' busy periods, as they run
        self.merge = MergeExecutor(env, spec.merge, spec.fleet, self.res, self.gpushare)
        self.merge.on_active = merge_memory(self.sidecars)
        ct = spec.cotenant
        self.cotenant = Cotenant(env, ct, [self.sidecars[i].gpu for i in ct.sidecars]) if ct is not None else None
        self.trainer = self._make_trainer()
        self.monitor = self._make_monitor()
        self.bound.register(*self._lookahead_sources())
        self.monitor.start()  # before the islands: same-instant events keep their order
        self.trainer.start()
        if self.cotenant is not None:
            self.cotenant.start()

    def _make_monitor(self) -> Monitor:
        """The observer: it samples the engines and the links, and builds what the policy sees."""
        return Monitor(
            self.env,
            self.spec.monitor,
            self.sidecars,
            self.res,
            self.trainer.view,
            self.progress,
            capacity_rps=self.capacity_rps,
            merging=lambda: self.merge.active,
            check=self.check,
        )

    def _lookahead_sources(self) -> list:
        """Everything that touches or reads the engines at instants it knows ahead (sim.lookahead), in
        the order the bound asks them: engines fed from outside (a remote KV pool: -inf while requests
        are to enter; a disaggregated fleet's decode engines get a bound of their own: a Feeder) and a
        router (its next hand-over) first, then a running merge (it lifts the bound without asking the
        others), the trainer's decisions, the monitor's samples, a co-tenant's switches, and with
        fleet.host_cores the hosts' preemptions."""
        first = [x for x in (self.fed, self.router) if x is not None]
        last = [x for x in (self.cotenant,) if x is not None]
        cores = [self.res] if self.spec.fleet.host_cores is not None else []
        return [*first, self.merge, self.trainer, self.monitor, *last, *cores]

    def what_if(self, steps) -> WhatIf:
        """This run (scenario, seed, draw, and whatever arrivals or latency model it was given) with
        merges at exactly `steps`, simulated in full on a fleet of its own: an oracle's question."""
        spec = self.spec.with_planned(PlannedSteps, PlannedSteps.Params(steps=tuple(int(k) for k in steps)))
        fleet = Fleet(spec, self.seed, draw=self.draw, check=self.check, **self._given)
        if fleet.shareable():  # the busy periods every what-if shares with the first (models.engine.tape): same results
            fleet.share(self._what_if_tapes)
        res = fleet.run()
        if self._what_if_tapes is None and fleet.shareable():
            self._what_if_tapes = fleet.tapes()
        e2e = censored_e2e(res.requests["e2e"], res.requests["arrival"], float(res.summary["sim_time_s"]))
        done = res.completed_merges
        dur = [m.end - m.decided_at for m in done]  # how long each merge held training
        return WhatIf(
            int(res.summary["slo_violations"]),
            float(e2e.sum()),
            tuple(m.step for m in done),
            float(np.mean(dur)) if dur else 0.0,
        )

    def _make_trainer(self) -> Trainer:
        """The islands: they ask the policy (`decide`; a planned one only about its next merge), run
        merge phases, and bank merges (a `merges` co-tenant also opens a window then)."""
        t, ct, gs = self.spec.training, self.spec.cotenant, self.gpushare
        merged = self._merged if ct is not None and ct.timetable.merge_window_s is not None else None
        return Trainer(
            self.env,
            t,
            self.seed,
            decide=self.decide,
            run_phase=self.merge.run_phase,
            merged=merged or self.progress.record_merge,
            stream_round=self._stream_round if t.streaming else None,
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

    def _make_sidecars(self) -> tuple:
        """(engines fed from outside or None, the engines): one engine per sidecar, or the prefill and
        decode ones of `disagg:` (sim.disagg), or those whose caches pool (`remote_kv:`, sim.kvstore)."""
        env, spec, la = self.env, self.spec, self.bound.lookahead
        fed = make_disagg(env, spec, self.arrivals, self.res, la)
        fed = fed or make_remote_kv(env, spec, self.arrivals, self.res, la)
        if fed is not None:
            return fed, fed.sidecars
        return None, make_sidecars(env, spec, self.arrivals, self.res.hosts, la, self.clients)

    def _stream_round(self, rec: MergeRecord):
        """A Streaming DiLoCo round (merge.fragments > 1): the fragments' phases, no barrier."""
        return self.merge.stream_round(rec, self.spec.merge.phases, self.spec.training.step_time_s)

    def _merged(self, steps: int) -> None:
        """A merge was banked: the progress model records it, a `merges` co-tenant opens a window."""
        self.progress.record_merge(steps)
        self.cotenant.merge_ended()

    def decide(self, step: int) -> bool:
        """The policy's answer for inner step `step`, from what the monitor observes now; or, for a
        planned policy (Policy.next_merge), from the step count, reading nothing of the engines,
        which may then have run ahead of now (tests/policies/test_policies.py: it equals `decide`'s)."""
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
        merges = self.trainer.merges_at_end(self.env.now)  # and one still running at the end, as unfinished
        extras, slo = self._extras(), self.spec.slo
        req = build_requests(self._per_sidecar(), merges, slo, extras)
        summary = build_summary(req, merges, slo, self._figures(req, merges, wall), extras)
        if self.check:
            check_run(req, merges, sum(self._given_counts()), summary["peak_link_load"], extras)
        return RunResult(
            self.spec.name,
            self.spec.policy_name,
            self.seed,
            self.draw,
            summary,
            req,
            merges,
            self.monitor.lazy_timeline(),
            list(self.trainer.decision_log),
            self.spec.digest,
            self.spec.params.model_dump(mode="json"),
            self.cotenant.windows() if self.cotenant is not None else [],
            self._merge_windows(merges),
        )

    def _extras(self) -> list:
        """What this run adds to its result beyond the core fleet (models.results.run Extra: columns,
        summary keys, invariants), in the order their summary keys come; only the parts it has."""
        cores, p, spec = [s.core for s in self.sidecars], self.spec.policy, self.spec
        parts = [
            Engines(self.sidecars, self._given_counts(), self.env.now) if self.fed is None else None,
            KVPools([c.kv for c in cores if c.kv is not None]),  # engine.kv_blocks or gpu_memory_gb
            PrefixCaches([c.px for c in cores if c.px is not None]),  # engine.prefix_cache
            EngineLimits(cores),  # engine.max_model_len, a client's time-out
            self.router,  # a router that routes (router.name not static)
            self.fed,  # disagg: or remote_kv: (the KV hand-offs or fetches)
            Clients(self.clients) if self.clients is not None else None,
            *spec.extras,  # the blocks a plug-in resolves (testbed_labels:)
            PolicyRun(self.policy, p.cls, p.h_min, p.h_max, max(self.trainer.island_step, default=0)),
            self.cotenant,
        ]
        return [x for x in parts if x is not None]

    def _given_counts(self) -> list[int]:
        """How many requests each engine was given: its arrivals, or its client's (a closed loop)."""
        return [len(a.t) for a in self.arrivals] if self.clients is None else [c.created for c in self.clients]

    def _merge_windows(self, merges: list[MergeRecord]) -> list[tuple[float, float]] | None:
        plan = self.spec.cotenant
        if plan is None or plan.timetable.merge_window_s is None:
            return None
        return [w for w in (plan.merge_window(m.end) for m in merges if not m.unfinished) if w is not None]

    def _per_sidecar(self) -> list[tuple]:
        """request_table's input: the arrivals' own arrays (no per-request copies: this table is the
        run's peak of memory); a closed loop's requests are the engines' own, with their client's
        columns (models.workload.clients: the batch or user, and when the client saw each request done);
        engines fed from outside give theirs (sim.disagg: each request once, on its prefill sidecar)."""
        if self.fed is not None:
            return self.fed.per_sidecar()
        api = self.spec.engine.api_s  # the client's and API server's path: the client sees tokens that much later
        if self.clients is None:
            return [
                (
                    s.t_arr,
                    np.asarray(a.prompt, dtype=np.int64),
                    np.asarray(a.output, dtype=np.int64),
                    s.admitted,
                    s.first_token + api if api else s.first_token,
                    s.finish + api if api else s.finish,
                )
                for s, a in zip(self.sidecars, self.arrivals)
            ]
        out = []
        for s, client in zip(self.sidecars, self.clients):
            c = s.core
            tag = np.array(c.tag, dtype=np.int64)
            extra = {tag_column(client): tag, "done": client.done_times(tag)}
            t, p, o = np.array(c.t_arr, dtype=np.float64), np.array(c.prompt, np.int64), np.array(c.output, np.int64)
            out.append((t, p, o, *s.results(), extra))
        return out

    def _figures(self, req: dict[str, np.ndarray], merges: list[MergeRecord], wall: float) -> dict[str, Any]:
        """The run's own figures (models.results.run build_summary puts them after the request figures)."""
        tr = self.trainer
        final_step = max(tr.island_step) if tr.island_step else 0
        arrived = arrivals_hash(self.arrivals if self.clients is None else self._created(req))
        return {
            "scenario": self.spec.name,
            "policy": self.spec.policy_name,
            "seed": self.seed,
            "draw": self.draw,
            "merge_steps": [m.step for m in merges if not m.unfinished],
            "unfinished_merge_step": next((m.step for m in merges if m.unfinished), None),
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

    def _created(self, req: dict[str, np.ndarray]) -> list[Arrivals]:
        """A closed loop's requests as arrivals: what its runs are compared by (they differ by policy)."""
        by = [req["sidecar"] == s for s in range(len(self.sidecars))]
        return [Arrivals(req["arrival"][m], req["prompt"][m], req["output"][m]) for m in by]


def simulate(sc, seed: int = 0, policy: str | None = None, params: dict | None = None, **kw) -> RunResult:
    """Run `sc` (a validated scenario, or a RunSpec) once with `policy` (default: its own;
    models.spec.load.policy_choice picks params)."""
    return Fleet(resolve(sc, policy, params), seed, **kw).run()
