"""Build one simulated fleet from a scenario and run it: the only place SimPy objects meet.

Resources live in fabrics (sim.fabric): one for the network and checkpoint storage, one per host
for its GPUs, CPU path and PCIe. Sidecar engines, islands and merge phases are the jobs on them.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from wadiloco.models import invariants as inv
from wadiloco.models.capacity import sidecar_capacity_rps
from wadiloco.models.config import Scenario
from wadiloco.models.interference import InterferenceWeights, default_weights
from wadiloco.models.latency import LatencyModel, default_latency
from wadiloco.models.metrics import request_table, summarize
from wadiloco.models.policies import POLICIES, make_policy
from wadiloco.models.policies.base import FutureView, LearnerSignals, Observation, PolicyContext
from wadiloco.models.rng import stream
from wadiloco.models.training import ProgressModel
from wadiloco.models.workloads import arrivals_hash, generate_arrivals
from wadiloco.sim.engine import Lookahead, Sidecar
from wadiloco.sim.fabric import INF, Fabric
from wadiloco.sim.topology import build_graph, host_node, ring_allreduce_flows, route
from wadiloco.sim.training import PHASES, MergeRecord, Trainer


@dataclass
class RunResult:
    scenario: str
    policy: str
    seed: int
    draw: int
    summary: dict[str, Any]
    requests: dict[str, np.ndarray] = field(repr=False)
    merges: list[MergeRecord] = field(repr=False)
    timeline: dict[str, np.ndarray] = field(repr=False)
    decisions: list[tuple[int, float, bool]] = field(repr=False)


def resolve_weights(sc: Scenario) -> InterferenceWeights:
    w = default_weights()
    o = sc.interference
    return InterferenceWeights(
        gpu_outer=w.gpu_outer if o.gpu_outer_weight is None else o.gpu_outer_weight,
        gpu_stage=w.gpu_stage if o.gpu_stage_weight is None else o.gpu_stage_weight,
        host_ckpt=w.host_ckpt if o.host_ckpt_weight is None else o.host_ckpt_weight,
        host_stage=w.host_stage if o.host_stage_weight is None else o.host_stage_weight,
        eager_host_s=w.eager_host_s,
        graph_gpu_s=w.graph_gpu_s,
    )


def engine_host_s(sc: Scenario, w: InterferenceWeights) -> float:
    """CPU time per iteration: the scheduler overhead, plus kernel launches when not using graphs."""
    return sc.engine.host_overhead_s + (0.0 if sc.engine.cuda_graphs else w.eager_host_s)


class HostRes:
    """One host's shared resources. No job crosses two of them, so each is its own fabric and a
    change on one (a serving iteration on the GPU) never re-allocates another. Each sidecar has
    its own GPU and its own CPU path (its engine thread's core, launch queue and memory path);
    host-wide merge work (staging, checkpoint serialisation) presses on every sidecar's CPU path."""

    def __init__(self, env, name: str, n_sidecars: int, sc: Scenario, check: bool):
        unl = set(sc.fleet.unlimited)
        gpu_cap = INF if "gpu" in unl else 1.0
        self.name = name

        def own(res: str, cap: float):
            return Fabric(env, f"{name}/{res}", check).link(res, cap)

        self.gpus = [own(f"gpu{j}", gpu_cap) for j in range(n_sidecars)]
        self.learner_gpu = own("learner_gpu", gpu_cap)
        self.cpus = [own(f"cpu{j}", INF if "host" in unl else 1.0) for j in range(n_sidecars)]
        self.pcie = own("pcie", INF if "pcie" in unl else sc.merge.pcie_gbps)

    def links(self):
        return [*self.gpus, *self.cpus, self.learner_gpu, self.pcie]


class Fleet:
    def __init__(
        self,
        sc: Scenario,
        seed: int,
        policy_name: str | None = None,
        policy_params: dict | None = None,
        *,
        draw: int = 0,
        reference_merges: int | None = None,
        reference_steps: int | None = None,
        check: bool | None = None,
        arrivals=None,
        latency: LatencyModel | None = None,
        lookahead: bool = True,
    ):
        self.sc = sc
        self.seed = int(seed)
        self.draw = draw
        # $WADILOCO_CHECK_INVARIANTS=1 turns the checks on for every run (the test suite sets it)
        env_check = os.environ.get("WADILOCO_CHECK_INVARIANTS", "").strip().lower() in ("1", "true", "yes", "on")
        self.check = (sc.monitor.check_invariants or env_check) if check is None else check
        self.env = env = simpy.Environment()
        self.lat = latency or default_latency()
        self.w = resolve_weights(sc)
        self.host_s = engine_host_s(sc, self.w)
        fc = sc.fleet
        self.horizon = sc.horizon_s

        # ---- workload (common random numbers: depends on seed and scenario only) ----
        seen_caps: list[float] = []

        def capacity(mean_prompt: float, mean_output: float) -> float:
            cap = sidecar_capacity_rps(
                self.lat,
                sc.engine.max_num_seqs,
                self.host_s,
                mean_prompt,
                mean_output,
                sc.engine.max_num_batched_tokens,
            )
            seen_caps.append(cap)
            return cap

        # Injected arrivals (metamorphic tests) still come with the scenario's own capacity figure,
        # which a deployed controller would know from configuration, not from the arrivals.
        generated = generate_arrivals(
            sc.workload,
            n_sidecars=fc.n_sidecars,
            horizon_s=sc.horizon_s,
            capacity_rps=capacity,
            seed=self.seed,
            base_dir=sc.base_dir,
            file=sc.source,
        )
        self.arrivals = arrivals if arrivals is not None else generated
        self.capacity_rps = seen_caps[-1] if seen_caps else None

        # ---- resources ----
        self.hosts: list[HostRes] = []
        for i in range(fc.islands):
            for h in range(fc.hosts_per_island):
                self.hosts.append(HostRes(env, host_node(i, h), fc.sidecars_per_host, sc, self.check))
        self.net = Fabric(env, "net", self.check)
        self.graph = build_graph(fc, sc.merge.checkpoint_gbps)
        self.edge_links = {(u, v): self.net.link(f"{u}->{v}", d["capacity"]) for u, v, d in self.graph.edges(data=True)}
        self.backplanes = {
            n: self.net.link(f"{n}/backplane", d["backplane_gbps"])
            for n, d in self.graph.nodes(data=True)
            if d.get("kind") == "switch"
        }
        ser = INF if "storage" in fc.unlimited else sc.merge.serialize_gbps
        self.serialize = [self.net.link(f"{hr.name}/serialize", ser) for hr in self.hosts]

        # ---- serving ----
        # Engines may run ahead of the SimPy clock up to the next instant anything else could look
        # at them or put work on their links (bound_changed); off until run() starts the clock.
        self.lookahead = Lookahead()
        self._lookahead_on = False
        self._use_lookahead = lookahead
        self._end = self.horizon + sc.drain_s
        self._mon_next = -INF
        self.sidecars: list[Sidecar] = []
        for s in range(fc.n_sidecars):
            hr = self.hosts[s // fc.sidecars_per_host]
            self.sidecars.append(
                Sidecar(
                    env,
                    s,
                    self.arrivals[s],
                    self.lat,
                    max_num_seqs=sc.engine.max_num_seqs,
                    max_num_batched_tokens=sc.engine.max_num_batched_tokens,
                    host_s=self.host_s,
                    gpu=hr.gpus[s % fc.sidecars_per_host],
                    host=hr.cpus[s % fc.sidecars_per_host],
                    fast_forward=sc.engine.fast_forward,
                    lookahead=self.lookahead,
                )
            )

        # ---- training ----
        self.progress = ProgressModel(
            sc.training.params, sc.training.tokens_per_step, fc.islands, sc.training.initial_loss_tokens
        )
        name = policy_name or sc.policy.name
        params = sc.policy.params if policy_params is None and name == sc.policy.name else (policy_params or {})
        self.policy_name = name
        ctx = PolicyContext(
            sc.merge.h_min,
            sc.merge.h_max,
            self.seed,
            draw,
            reference_merges,
            reference_steps,
            stream(self.seed, "policy", name, draw),
        )
        self.policy = make_policy(name, params, ctx, sc.source)
        if POLICIES[name].oracle:
            times = np.sort(np.concatenate([a.t for a in self.arrivals])) if self.arrivals else np.empty(0)
            self.policy.prepare(FutureView(times, sc.horizon_s, sc.training.step_time_s, fc.n_sidecars))

        # ---- monitor (timeline and pressure windows; past only) ----
        self.bin_s = sc.monitor.sample_s
        self.tl: dict[str, list[float]] = {
            k: [] for k in ("t", "arrivals", "queue", "running", "merging", "p_net", "p_ckpt")
        }
        self._arr_seen = [0] * len(self.sidecars)
        self._counts = np.zeros(int((sc.horizon_s + sc.drain_s) / self.bin_s) + 2)
        self._n_bins = 0
        self.merging = False
        # observe(): figures that change only when the monitor adds a bin, or on a merge, are cached
        self._win_n = max(1, int(round(sc.monitor.pressure_window_s / self.bin_s)))
        self._press_key = -1  # number of monitor bins the cached pressures were computed from
        self._press: tuple[float, float, float] = (0.0, 0.0, 0.0)  # p_net, p_srv, p_ckpt
        self._sig_key: float | None = None  # progress.merged_tokens the cached learner signals assume
        self._sig_cache: dict[int, LearnerSignals] = {}  # staleness -> signals (frozen, shareable)
        self._dur_key: tuple = ()
        self._dur_mean = 0.0
        env.process(self._monitor())
        self.trainer = Trainer(self, self.policy, sc.horizon_s)

    # ---- how far engines may run ahead -------------------------------------------------------
    def bound_changed(self) -> None:
        """Recompute the lookahead bound. Outside a merge, only three things read an engine or
        touch its links: the policy's decisions (at a trainer step whose time is drawn ahead),
        the monitor's samples and the end of the run. During a merge there is no bound."""
        if not self._lookahead_on or self.merging:
            self.lookahead.until = -INF
            return
        t = self.trainer.next_decision_at()
        if self._mon_next < t:
            t = self._mon_next
        self.lookahead.until = t if t < self._end else self._end

    # ---- merge phases ----------------------------------------------------------------------
    def run_phase(self, phase: str):
        sc, fc, w = self.sc, self.sc.fleet, self.w
        env = self.env
        self.merging = True
        self.bound_changed()  # no bound while merge work is on the links
        per_host = sc.training.params / fc.hosts_per_island
        jobs = []

        def hold(link, weight, name):
            """Merge work that presses on `link` for as long as its phase's transfer lasts."""
            return link.fabric.start([link], INF, weight, 1.0, ("hold", name))

        if phase == "stage":
            gbits = per_host * sc.merge.pseudo_grad_bytes_per_param * 8 / 1e9
            for hr in self.hosts:
                holds = [hold(c, w.host_stage, "stage") for c in hr.cpus] if w.host_stage > 0 else []
                if fc.colocation == "same_gpu" and w.gpu_stage > 0:
                    holds += [hold(g, w.gpu_stage, "stage") for g in hr.gpus]
                j = hr.pcie.fabric.start([hr.pcie], gbits, 1.0, INF, ("merge", "stage"))
                j.done.callbacks.append(lambda _e, hs=holds: Fabric.release(hs))
                jobs.append(j)
        elif phase == "allreduce":
            gb = per_host * sc.merge.pseudo_grad_bytes_per_param
            for src, dst, gbits in ring_allreduce_flows(fc, gb):
                jobs.append(self.net.start(self._path(src, dst), gbits, 1.0, INF, ("merge", "allreduce")))
        elif phase == "outer":
            work = per_host / sc.merge.outer_elements_per_s
            for hr in self.hosts:
                gpu = hr.gpus[0] if fc.colocation == "same_gpu" and hr.gpus else hr.learner_gpu
                jobs.append(gpu.fabric.start([gpu], work, w.gpu_outer, 1.0, ("merge", "outer")))
        elif phase == "ckpt":
            gbits = per_host * sc.merge.checkpoint_bytes_per_param * 8 / 1e9
            for k, hr in enumerate(self.hosts):
                holds = [hold(c, w.host_ckpt, "ckpt") for c in hr.cpus] if w.host_ckpt > 0 else []
                path = [self.serialize[k]] + self._path(hr.name, "store")
                j = self.net.start(path, gbits, 1.0, INF, ("merge", "ckpt"))
                j.done.callbacks.append(lambda _e, hs=holds: Fabric.release(hs))
                jobs.append(j)
        else:  # pragma: no cover
            raise ValueError(phase)
        pending = [j.done for j in jobs if not j.done.triggered]
        if pending:
            yield env.all_of(pending)
        self.merging = phase != PHASES[-1]
        self.bound_changed()

    def _path(self, src: str, dst: str):
        edges = route(self.graph, src, dst)
        links = [self.edge_links[e] for e in edges]
        nodes = [edges[0][0]] + [v for _, v in edges] if edges else []
        links += [self.backplanes[n] for n in nodes if n in self.backplanes]
        return links

    # ---- observation -------------------------------------------------------------------------
    def _window_mean(self, key: str) -> float:
        n = self._win_n
        xs = self.tl[key][-n:]
        return float(sum(xs) / len(xs)) if xs else 0.0

    def _pressures(self) -> tuple[float, float, float]:
        """(p_net, p_srv, p_ckpt) over the pressure window. They depend only on the monitor's bins,
        so they are recomputed only when the monitor has added one since the last call."""
        tl = self.tl
        key = len(tl["t"])
        if key == self._press_key:
            return self._press
        n = self._win_n
        recent = self._counts[: self._n_bins][-n:]
        rate = float(recent.sum() / (len(recent) * self.bin_s)) if len(recent) else 0.0
        # p_srv: serving load relative to capacity over the pressure window, the larger of
        # (a) the arrival rate over the fleet's request capacity (unknown for a trace replayed
        # without `load`; then only (b) counts) and (b) the mean occupancy, (waiting + in batch)
        # over the fleet's batch slots (max_num_seqs per sidecar), sampled by the monitor.
        cap_total = (self.capacity_rps or 0.0) * len(self.sidecars)
        slots = max(1, self.sc.engine.max_num_seqs * len(self.sidecars))
        occ = [(q + r) / slots for q, r in zip(tl["queue"][-n:], tl["running"][-n:])]
        p_srv = min(1.0, max(rate / cap_total if cap_total > 0 else 0.0, float(sum(occ) / len(occ)) if occ else 0.0))
        self._press = (min(1.0, self._window_mean("p_net")), p_srv, min(1.0, self._window_mean("p_ckpt")))
        self._press_key = key
        return self._press

    def _signals(self, tr: Trainer) -> tuple[LearnerSignals, ...]:
        """One LearnerSignals per island. They depend on staleness and on the tokens banked by
        merges, so they are cached per staleness until the next merge is recorded."""
        if self._sig_key != self.progress.merged_tokens:
            self._sig_key = self.progress.merged_tokens
            self._sig_cache = {}
        cache = self._sig_cache
        last = tr.last_merge_step
        n_isl = len(tr.island_step)
        signals = []
        for k in tr.island_step:
            stale = max(0, k - last)
            s = cache.get(stale)
            if s is None:
                s = cache[stale] = LearnerSignals(
                    self.progress.dloss_if_merged(stale) / n_isl, stale * self.sc.training.tokens_per_step, stale
                )
            signals.append(s)
        return tuple(signals)

    def _check_not_ahead(self, now: float) -> None:
        late = [s.idx for s in self.sidecars if s.clock > now]
        if late:
            raise inv.InvariantError(f"engines {late} ran past an observation at t={now!r}")

    def observe(self, step: int, tr: Trainer) -> Observation:
        now = self.env.now
        if self.check:
            self._check_not_ahead(now)
        counts = self._counts[: self._n_bins].copy()  # a copy: the policy must not see later bins
        p_net, p_srv, p_ckpt = self._pressures()
        queue = sum(s.queue_len(now) for s in self.sidecars)
        running = sum(s.running() for s in self.sidecars)
        done = [m for m in tr.merges if m.end > 0]
        key = (len(done), done[-1].end) if done else ()
        if key != self._dur_key:
            self._dur_key = key
            self._dur_mean = float(np.mean([m.duration for m in done])) if done else 0.0
        return Observation(
            now=now,
            step=step,
            last_merge_step=tr.last_merge_step,
            merges=len(done),
            h_min=self.sc.merge.h_min,
            h_max=self.sc.merge.h_max,
            step_time_s=self.sc.training.step_time_s,
            learners=self._signals(tr),
            p_net=p_net,
            p_srv=p_srv,
            p_ckpt=p_ckpt,
            queue_len=queue,
            running=running,
            bin_s=self.bin_s,
            arrival_counts=counts,
            merge_duration_s=self._dur_mean,
        )

    def _monitor(self):
        env = self.env
        bin_s = self.bin_s
        wan = [lk for (u, v), lk in self.edge_links.items() if self.graph.edges[u, v]["kind"] in ("wan", "nic")]
        store = [lk for (u, v), lk in self.edge_links.items() if self.graph.edges[u, v]["kind"] == "storage"]
        # Only limited links count (an unlimited one is never busy): [link, capacity-seconds per bin,
        # its `used` at the last sample].
        wan_u = [[lk, lk.capacity * bin_s, 0.0] for lk in wan if not lk.unlimited]
        store_u = [[lk, lk.capacity * bin_s, 0.0] for lk in store if not lk.unlimited]

        def util(rows) -> float:
            best = 0.0
            for row in rows:
                used = row[0].used
                x = (used - row[2]) / row[1]
                row[2] = used
                if x > best:
                    best = x
            return best

        sidecars = self.sidecars
        seen_at = self._arr_seen
        counts = self._counts
        n_counts = len(counts)
        tl = self.tl
        t_, arr_, queue_, running_, merging_, net_, ckpt_ = (
            tl[k].append for k in ("t", "arrivals", "queue", "running", "merging", "p_net", "p_ckpt")
        )
        end = self._end
        while env.now < end:
            self._mon_next = env.now + bin_s
            self.bound_changed()
            yield env.timeout(bin_s)
            now = env.now
            if self.check:
                self._check_not_ahead(now)
            self.net._advance()
            arrived = queue = running = 0
            for k, s in enumerate(sidecars):
                t_list = s._t_list
                seen = bisect_right(t_list, now, seen_at[k])  # arrivals so far
                arrived += seen - seen_at[k]
                seen_at[k] = seen
                queue += len(s.waiting) + (seen - s.next_i)  # Sidecar.queue_len(now)
                running += s.running()
            t_(now)
            arr_(arrived)
            if self._n_bins < n_counts:
                counts[self._n_bins] = arrived
                self._n_bins += 1
            queue_(queue)
            running_(running)
            merging_(1.0 if self.merging else 0.0)
            net_(util(wan_u))
            ckpt_(util(store_u))

    def peak_link_load(self) -> float:
        links = list(self.net.links.values()) + [lk for hr in self.hosts for lk in hr.links()]
        return max((lk.peak_load for lk in links), default=0.0)

    def check_invariants(self, req, merges) -> None:
        n_arrived = sum(len(a.t) for a in self.arrivals)
        inv.check_requests(req, n_arrived)
        inv.check_merges(merges)
        inv.check_peak_load(self.peak_link_load())
        if POLICIES[self.policy_name].respects_corridor:
            inv.check_corridor(
                [m.step for m in merges], self.sc.merge.h_min, self.sc.merge.h_max, max(self.trainer.island_step)
            )
        if not POLICIES[self.policy_name].oracle and getattr(self.policy, "_future_seen", False):
            raise inv.InvariantError("an online policy was given the future")

    # ---- run ---------------------------------------------------------------------------------
    def run(self) -> RunResult:
        t0 = time.perf_counter()
        self._lookahead_on = self._use_lookahead
        self.bound_changed()
        self.env.run(until=self._end)
        wall = time.perf_counter() - t0
        merges = [m for m in self.trainer.merges if m.end > 0]
        # the arrivals' own arrays (no per-request copies: this table is the run's peak of memory)
        req = request_table(
            [
                (
                    s.t_arr,
                    np.asarray(a.prompt, dtype=np.int64),
                    np.asarray(a.output, dtype=np.int64),
                    s.admitted,
                    s.first_token,
                    s.finish,
                )
                for s, a in zip(self.sidecars, self.arrivals)
            ],
            self.sc.slo.ttft_s,
            self.sc.slo.tpot_s,
            merges,
        )
        unmerged = max(self.trainer.island_step) - self.trainer.last_merge_step if self.trainer.island_step else 0
        summary = summarize(req, merges, self.sc.slo.ttft_s, self.sc.slo.tpot_s)
        summary.update(
            {
                "scenario": self.sc.name,
                "policy": self.policy_name,
                "seed": self.seed,
                "draw": self.draw,
                "merge_steps": [m.step for m in merges],
                "final_loss": self.progress.final_loss(unmerged),
                "inner_steps": max(self.trainer.island_step) if self.trainer.island_step else 0,
                "sim_time_s": float(self.env.now),
                "wall_time_s": wall,
                "arrivals_hash": arrivals_hash(self.arrivals),
                "capacity_rps_per_sidecar": self.capacity_rps,
                "engine_iterations": int(sum(s.iterations for s in self.sidecars)),
                "contended_iterations": int(sum(s.contended_iterations for s in self.sidecars)),
            }
        )
        summary["peak_link_load"] = self.peak_link_load()
        if self.check:
            self.check_invariants(req, merges)
        tl = {k: np.asarray(v, dtype=float) for k, v in self.tl.items()}
        return RunResult(
            self.sc.name,
            self.policy_name,
            self.seed,
            self.draw,
            summary,
            req,
            merges,
            tl,
            list(self.trainer.decision_log),
        )


def simulate(sc: Scenario, seed: int = 0, policy: str | None = None, params: dict | None = None, **kw) -> RunResult:
    return Fleet(sc, seed, policy, params, **kw).run()
