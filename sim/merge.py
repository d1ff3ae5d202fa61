"""A merge's phases (listed in sim.training) as fabric jobs on the fleet's resources: sizes and
bandwidths decide how long each takes, the interference weights (models.training.interference, or the
scenario's own: models.spec.run.MergeSpec) how hard its holds press on serving, and the topology how flows are routed.
Which GPU training work runs on, and what else holds it (all-reduce kernels, checkpoint staging
copies), is sim.gpushare's (fleet.gpu_sharing).
"""

from __future__ import annotations

from collections.abc import Callable

from wadiloco.models.spec.run import FleetSpec, MergeSpec
from wadiloco.sim.checkpoint import Checkpointer, hold
from wadiloco.sim.fabric import INF, Fabric, Job, Link
from wadiloco.sim.gpushare import GpuShare
from wadiloco.sim.lookahead import unbound
from wadiloco.sim.resources import Resources
from wadiloco.sim.topology import ring_allreduce_flows, route

_hold = hold  # merge work that presses on a link until its phase's transfer ends


class MergeExecutor:
    """Runs merge phases on the fleet's resources. `active` is true from the start of a phase to
    the end of the last one; `on_active(active)`, if set, hears when that flips (merge memory:
    sim.build), before the lookahead bound does. A lookahead source (sim.lookahead): while merge work
    runs, its next completion. A phase moves `frac` of the model (1, or one Streaming DiLoCo
    fragment's share)."""

    def __init__(self, env, m: MergeSpec, fleet: FleetSpec, res: Resources, gs: GpuShare):
        self.env = env
        self.m, self.fleet = m, fleet
        self.w = m.weights
        self.res = res
        self.gs = gs
        self.bound_changed = unbound
        self.on_active: Callable[[bool], None] | None = None
        self.active = False
        self.ckpt = Checkpointer(env, m, res, self._path, lambda: self.bound_changed(), gs)
        self.host_work = self.ckpt.host_work  # (kind, host, start, end) of merge CPU work
        self._last = m.phases[-1] if m.phases else None
        self._running = 0  # phases running now (fragments of a streaming round overlap)
        self._timeouts: list[float] = []  # instants merge work of a fixed duration ends (host codec passes)
        self._jobs = {"stage": self._stage, "allreduce": self._allreduce, "outer": self._outer, "ckpt": self._ckpt}
        self._paths: dict[tuple[str, str], tuple[Link, ...]] = {}  # (src, dst) -> `_path`'s links (a static graph)
        for f in res.fabrics:  # while merge work is on the links, its next completion bounds the engines
            f.timer_moved = self.timer_moved
        self._set_up = False  # the run's first all-reduce has paid merge.allreduce_setup_s

    def next_touch_at(self) -> float:
        """While a phase or a background save runs, merge work is on the engines'
        links, and what it does there changes only when one of its jobs completes (a fabric's timer:
        the processes waiting for it then start, stop or release jobs at that instant) or a fixed
        duration ends (`_timeouts`): the earliest of those. Else +inf (a merge only starts after a
        decision, which the trainer bounds); a streaming round's next fragment start either way."""
        t = self._next_fragment
        if self.active or self.ckpt.busy or self._running:
            t = min(t, self.res.next_timer_at(), *self._timeouts)
        return t

    def timer_moved(self) -> None:
        """A fabric's next completion moved (sim.fabric Fabric.timer_moved): the bound may move."""
        if self.active or self.ckpt.busy or self._running:
            self.bound_changed()

    _next_fragment = INF  # when a streaming round's next fragment starts (stream_round)

    def run_phase(self, phase: str, frac: float = 1.0):
        """A SimPy generator: start the phase's jobs and wait until they are all done."""
        start = self._jobs.get(phase)
        if start is None:
            raise ValueError(phase)
        self._set_active(True)  # merge work is on the links: its completions bound the engines (next_touch_at)
        pending = [e for e in map(_event, start(frac)) if not e.triggered]
        if pending:
            yield self.env.all_of(pending)
        self._set_active(phase != self._last)

    def _set_active(self, on: bool) -> None:
        if on != self.active:
            self.active = on
            if self.on_active is not None:
                self.on_active(on)
        self.bound_changed()

    def _stage(self, frac: float = 1.0) -> list[Job]:
        w = self.w
        gbits = self.m.stage_gbits(frac)
        jobs = []
        for hr in self.res.hosts:
            holds = [_hold(c, w.host_stage, "stage") for c in hr.cpu_paths()] if w.host_stage > 0 else []
            if self.gs.shared:
                holds += self.gs.holds(hr, w.gpu_stage, "stage")
            j = hr.pcie.fabric.start([hr.pcie], gbits, 1.0, INF, ("merge", "stage"))
            j.done.callbacks.append(lambda _e, hs=holds: Fabric.release(hs))
            jobs.append(j)
        return jobs

    def _allreduce(self, frac: float = 1.0) -> list:
        m = self.m
        if m.compression != "none":
            return [self.env.process(self._compressed_allreduce(frac))]
        return self._ring(m.shard(frac) * m.pseudo_grad_bytes_per_param)

    def _ring(self, shard_bytes: float) -> list:
        """A ring all-reduce of each host's shard: its fixed time (the ring steps' latency of every
        call, and the set-up on the run's first all-reduce: models.network.collective), then its flows."""
        wait = self._ring_wait()
        if wait <= 0:
            return self._ring_flows(shard_bytes)
        return [self.env.process(self._waited_ring(wait, shard_bytes))]

    def _ring_wait(self) -> float:
        wait = self.m.ring_wait_s
        if not self._set_up and self.fleet.islands > 1:
            self._set_up = True
            wait += self.m.allreduce_setup_s
        return wait

    def _waited_ring(self, wait: float, shard_bytes: float):
        end = self.env.now + wait  # (the instant SimPy fires the timeout at): a bound while it runs
        self._timeouts.append(end)
        self.bound_changed()
        yield self.env.timeout(wait)
        self._timeouts.remove(end)
        pending = [e for e in map(_event, self._ring_flows(shard_bytes)) if not e.triggered]
        if pending:
            yield self.env.all_of(pending)

    def _ring_flows(self, shard_bytes: float) -> list[Job]:
        net = self.res.net.fabric
        with net.batch():
            flows = [
                net.start(self._path(src, dst), gbits, 1.0, INF, ("merge", "allreduce"))
                for src, dst, gbits in ring_allreduce_flows(self.fleet, shard_bytes)
            ]
        holds = [j for hr in self.res.hosts for j in self.gs.kernel_holds(hr, "allreduce")] if flows else []
        if holds:  # NCCL's kernels run on the outer shard's GPU until the last flow is in (sim.gpushare)
            self.env.all_of([f.done for f in flows]).callbacks.append(lambda _e: Fabric.release(holds))
        return flows

    def _compressed_allreduce(self, frac: float):
        """Quantise the shard, all-reduce the smaller payload, dequantise the result: two elementwise
        passes over the shard, on the GPU the outer step runs on or on the host CPU
        (`compression_on`)."""
        m = self.m
        for step in ("quantise", "allreduce", "dequantise"):
            if step == "allreduce":
                jobs = self._ring(m.shard(frac) * m.compressed_bytes_per_param)
            else:
                jobs = self._codec(m.shard(frac), step)
            pending = [e for e in map(_event, jobs) if not e.triggered]
            if pending:
                yield self.env.all_of(pending)

    def _codec(self, elements: float, step: str) -> list:
        """One elementwise pass over each host's shard: a GPU job of the outer step's weight (a
        memory-bound kernel like it), or CPU work that presses on the host's CPU paths for
        `elements / compress_host_elements_per_s` seconds."""
        m, w, jobs = self.m, self.w, []
        for k, hr in enumerate(self.res.hosts):
            if m.compression_on == "gpu":
                gpu = self._outer_gpu(hr)
                work = elements / m.compress_gpu_elements_per_s
                jobs.append(gpu.fabric.start([gpu], work, w.gpu_outer, 1.0, ("merge", step)))
            else:
                jobs.append(self.env.process(self._host_codec(k, elements / m.compress_host_elements_per_s)))
        return jobs

    def _host_codec(self, k: int, seconds: float):
        hr, t0 = self.res.hosts[k], self.env.now
        holds = [_hold(c, self.w.host_ckpt, "codec") for c in hr.cpu_paths()] if self.w.host_ckpt > 0 else []
        end = t0 + seconds  # (the instant SimPy fires the timeout at)
        self._timeouts.append(end)
        self.bound_changed()
        yield self.env.timeout(seconds)
        self._timeouts.remove(end)
        Fabric.release(holds)
        self.host_work.append(("codec", k, t0, self.env.now))

    def _outer_gpu(self, hr) -> Link:
        return self.gs.outer_gpu(hr)

    def _outer(self, frac: float = 1.0) -> list[Job]:
        work = self.m.shard(frac) / self.m.outer_elements_per_s
        jobs = []
        for hr in self.res.hosts:
            gpu = self._outer_gpu(hr)
            jobs.append(gpu.fabric.start([gpu], work, self.w.gpu_outer, self.gs.cap, ("merge", "outer")))
        return jobs

    def _ckpt(self, frac: float = 1.0) -> list:
        """The `ckpt` phase (sim.checkpoint). Under fleet.gpu_sharing timeslice/mps a synchronous
        checkpoint first stages every host's shard device-to-host (an async one stages anyway)."""
        if self.gs.steps_hold and self.m.checkpoint_mode == "sync":
            return [self.env.process(self._staged_ckpt(frac))]
        return self.ckpt.phase(frac)

    def _staged_ckpt(self, frac: float):
        """The device-to-host copy of each host's checkpoint shard crosses its PCIe, holding the
        GPU's copy path (sim.gpushare), then the checkpoint is serialised and written."""
        copies = []
        for hr in self.res.hosts:
            holds = self.gs.kernel_holds(hr, "ckpt_stage")
            j = hr.pcie.fabric.start([hr.pcie], self.m.ckpt_gbits(frac), 1.0, INF, ("merge", "ckpt_stage"))
            j.done.callbacks.append(lambda _e, hs=holds: Fabric.release(hs))
            copies.append(j.done)
        pending = [e for e in copies if not e.triggered]
        if pending:
            yield self.env.all_of(pending)
        pending = [e for e in map(_event, self.ckpt.phase(frac)) if not e.triggered]
        if pending:
            yield self.env.all_of(pending)

    # -- Streaming DiLoCo ---------------------------------------------------------------------
    def stream_round(self, rec, phases, step_time_s: float):
        """A SimPy generator: one outer round of Streaming DiLoCo (Douillard et al. 2025). The model
        is in P fragments; fragment p runs the merge phases on its 1/P share of the model starting
        p x offset inner steps (at the mean step time) after the round starts, while the islands
        keep stepping: its synchronisation overlaps inner steps, there is no barrier. The round's
        phase times in `rec.phases` are fragment 0's."""
        p_n, offset = self.m.fragments, self.m.fragment_offset_steps
        t0 = self.env.now
        self._starts = [t0 + p * offset * step_time_s for p in range(p_n)]  # none has started yet
        self._next_fragment = t0
        self.bound_changed()
        frags = [self.env.process(self._fragment(p, t0 + p * offset * step_time_s, rec, phases)) for p in range(p_n)]
        yield self.env.all_of(frags)

    def _fragment(self, p: int, at: float, rec, phases):
        if at > self.env.now:
            yield self.env.timeout(at - self.env.now)
        self._starts.remove(at)
        self._next_fragment = min(self._starts, default=INF)
        self._running += 1
        for phase in phases:
            t0 = self.env.now
            if p == 0:
                rec.running = (phase, t0)
            yield from self.run_phase(phase, 1.0 / self.m.fragments)
            if p == 0:
                rec.phases[phase] = (t0, self.env.now)
                rec.running = None
        self._running -= 1
        self.bound_changed()

    def _path(self, src: str, dst: str) -> list[Link]:
        """The links a flow from `src` to `dst` crosses: the fewest-hop route's edges, then the
        backplane of every switch on it. Found once per pair: the graph does not change in a run, and
        every merge sends the same flows (networkx's search was ~1% of a bursty run)."""
        got = self._paths.get((src, dst))
        if got is None:
            net = self.res.net
            edges = route(net.graph, src, dst)
            nodes = [edges[0][0]] + [v for _, v in edges] if edges else []
            got = (*(net.edge_links[e] for e in edges), *(net.backplanes[n] for n in nodes if n in net.backplanes))
            self._paths[src, dst] = got
        return list(got)


def _event(x):
    """What a phase waits for: a job's completion, or an event (a SimPy process)."""
    return x.done if isinstance(x, Job) else x
