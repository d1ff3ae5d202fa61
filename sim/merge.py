"""A merge's phases (listed in sim.training) as fabric jobs on the fleet's resources: sizes and
bandwidths decide how long each takes, the interference weights (models.interference, or the
scenario's own) how hard its holds press on serving, and the topology how flows are routed.
"""

from __future__ import annotations

from wadiloco.models.interference import InterferenceWeights, default_weights
from wadiloco.models.scenario import Scenario
from wadiloco.sim.fabric import INF, Fabric, Job, Link
from wadiloco.sim.resources import Resources
from wadiloco.sim.topology import ring_allreduce_flows, route


def resolve_weights(sc: Scenario) -> InterferenceWeights:
    """The calibrated weights, with any the scenario sets in `interference:` in their place."""
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


def _hold(link: Link, weight: float, name: str) -> Job:
    """Merge work that presses on `link` for as long as its phase's transfer lasts."""
    return link.fabric.start([link], INF, weight, 1.0, ("hold", name))


class MergeExecutor:
    """Runs merge phases on the fleet's resources. `active` is true from the start of a phase to
    the end of the last one; `bound_changed` tells the lookahead bound when that flips."""

    def __init__(self, env, sc: Scenario, w: InterferenceWeights, res: Resources, bound_changed):
        self.env = env
        self.sc = sc
        self.w = w
        self.res = res
        self.bound_changed = bound_changed
        self.active = False
        self.host_work: list[tuple[str, int, float, float]] = []  # (kind, host, start, end) of merge CPU work
        self._last = sc.merge.phases[-1] if sc.merge.phases else None
        self._jobs = {"stage": self._stage, "allreduce": self._allreduce, "outer": self._outer, "ckpt": self._ckpt}

    def next_work_at(self) -> float:
        """A lookahead source: -inf while a phase runs (merge work is on the engines' links now),
        else +inf (a merge only starts after a decision, which the trainer bounds)."""
        return -INF if self.active else INF

    def run_phase(self, phase: str):
        """A SimPy generator: start the phase's jobs and wait until they are all done."""
        start = self._jobs.get(phase)
        if start is None:
            raise ValueError(phase)
        self.active = True
        self.bound_changed()  # no bound while merge work is on the links
        pending = [j.done for j in start() if not j.done.triggered]
        if pending:
            yield self.env.all_of(pending)
        self.active = phase != self._last
        self.bound_changed()

    def _per_host(self) -> float:
        """Parameters each host of an island holds a shard of."""
        return self.sc.training.params / self.sc.fleet.hosts_per_island

    def _stage(self) -> list[Job]:
        sc, w = self.sc, self.w
        gbits = self._per_host() * sc.merge.pseudo_grad_bytes_per_param * 8 / 1e9
        jobs = []
        for hr in self.res.hosts:
            holds = [_hold(c, w.host_stage, "stage") for c in hr.cpu_paths()] if w.host_stage > 0 else []
            if sc.fleet.colocation == "same_gpu" and w.gpu_stage > 0:
                holds += [_hold(g, w.gpu_stage, "stage") for g in hr.gpus]
            j = hr.pcie.fabric.start([hr.pcie], gbits, 1.0, INF, ("merge", "stage"))
            j.done.callbacks.append(lambda _e, hs=holds: Fabric.release(hs))
            jobs.append(j)
        return jobs

    def _allreduce(self) -> list[Job]:
        gb = self._per_host() * self.sc.merge.pseudo_grad_bytes_per_param
        net = self.res.net.fabric
        return [
            net.start(self._path(src, dst), gbits, 1.0, INF, ("merge", "allreduce"))
            for src, dst, gbits in ring_allreduce_flows(self.sc.fleet, gb)
        ]

    def _outer(self) -> list[Job]:
        work = self._per_host() / self.sc.merge.outer_elements_per_s
        jobs = []
        for hr in self.res.hosts:
            gpu = hr.gpus[0] if self.sc.fleet.colocation == "same_gpu" and hr.gpus else hr.learner_gpu
            jobs.append(gpu.fabric.start([gpu], work, self.w.gpu_outer, 1.0, ("merge", "outer")))
        return jobs

    def _ckpt(self) -> list[Job]:
        return [j for k in range(len(self.res.hosts)) for j in self._ckpt_host(k)]

    def _ckpt_host(self, k: int) -> list[Job]:
        """Host k's checkpoint shard: serialisation, CPU work of `bytes / (rate x threads)` seconds on
        the host's serialisers that presses on its CPU paths while (and only while) it runs, and the
        write, an I/O transfer to the store fed by the serialisers (never faster than they make
        bytes; after they are done, from the buffer they filled). A slow WAN or store lengthens the
        write, not the CPU pressure: a thread waiting on I/O is idle."""
        w, net, hr = self.w, self.res.net, self.res.hosts[k]
        gbits = self._per_host() * self.sc.merge.checkpoint_bytes_per_param * 8 / 1e9
        ser = net.serialize[k]
        weight = w.host_ckpt * self.sc.merge.serialize_threads  # each thread presses like the measured one
        holds = [_hold(c, weight, "ckpt") for c in hr.cpu_paths()] if weight > 0 else []
        s = net.fabric.start([ser], gbits, 1.0, INF, ("merge", "serialize"))
        t0 = self.env.now
        s.done.callbacks.append(lambda _e: self._host_done(holds, "ckpt", k, t0))
        write = net.fabric.start(self._path(hr.name, "store"), gbits, 1.0, ser.capacity, ("merge", "ckpt"))
        return [s, write]

    def _host_done(self, holds: list[Job], kind: str, host: int, t0: float) -> None:
        """Merge CPU work on a host ended: its holds go, and `host_work` records how long it pressed."""
        Fabric.release(holds)
        self.host_work.append((kind, host, t0, self.env.now))

    def _path(self, src: str, dst: str) -> list[Link]:
        """The links a flow from `src` to `dst` crosses: the fewest-hop route's edges, then the
        backplane of every switch on it."""
        net = self.res.net
        edges = route(net.graph, src, dst)
        links = [net.edge_links[e] for e in edges]
        nodes = [edges[0][0]] + [v for _, v in edges] if edges else []
        links += [net.backplanes[n] for n in nodes if n in net.backplanes]
        return links
