"""The checkpoint of a merge: serialisation as CPU work, the write as an I/O transfer, and the two
ways a training team can move it off serving's path (merge.checkpoint_mode, checkpoint_stagger).

- sync (default): the merge waits for every host's serialisation and write.
- async, as PyTorch DCP's `async_save` does it: the merge blocks only while each host copies its
  shard to pinned host memory over PCIe (the staging); serialisation and the write then run in the
  background while training resumes, and their CPU pressure continues for exactly as long as the
  serialisation's work. One save is in flight at a time: the next checkpoint waits for the last one
  (DCP waits on the previous save's future before it stages again).
- stagger k: at most k hosts serialise and write at once; the others queue, in host order.
"""

from __future__ import annotations

from collections.abc import Callable

from wadiloco.models.spec.run import MergeSpec
from wadiloco.sim.fabric import INF, Fabric, Job, Link
from wadiloco.sim.gpushare import GpuShare
from wadiloco.sim.resources import Resources


def hold(link: Link, weight: float, name: str) -> Job:
    """Merge work that presses on `link` until released."""
    return link.fabric.start([link], INF, weight, 1.0, ("hold", name))


class Checkpointer:
    """Writes each host's checkpoint shard. `busy` is true while a background save runs (merge work
    is then on the engines' links although no merge phase runs); `host_work` records every host's
    merge CPU work as (kind, host, start, end)."""

    def __init__(
        self,
        env,
        m: MergeSpec,
        res: Resources,
        path: Callable,
        bound_changed: Callable,
        gs: GpuShare,
    ):
        self.env, self.m, self.w, self.res, self.gs = env, m, m.weights, res, gs
        self.path, self.bound_changed = path, bound_changed
        self.host_work: list[tuple[str, int, float, float]] = []
        self._background = None  # the save in flight (async), a SimPy process

    @property
    def busy(self) -> bool:
        return self._background is not None and not self._background.triggered

    def phase(self, frac: float = 1.0) -> list:
        """The `ckpt` phase: what the merge waits for (jobs or events)."""
        if self.m.checkpoint_mode == "async":
            return [self.env.process(self._async(frac))]
        return self.write_all(frac)

    def write_all(self, frac: float) -> list:
        n, k = len(self.res.hosts), self.m.checkpoint_stagger
        if k is None or k >= n:
            with self.res.net.fabric.batch():  # (every host's serialisers and writes start together)
                return [j for h in range(n) for j in self._host(h, frac)]
        queue = list(range(n))
        return [self.env.process(self._lane(queue, frac)) for _ in range(k)]

    def _lane(self, queue: list[int], frac: float):
        """One of k writer slots: takes the next waiting host until none is left."""
        while queue:
            jobs = [j.done for j in self._host(queue.pop(0), frac) if not j.done.triggered]
            if jobs:
                yield self.env.all_of(jobs)

    def _host(self, k: int, frac: float) -> list[Job]:
        """Host k's checkpoint shard: serialisation, CPU work of `bytes / (rate x threads)` seconds on
        the host's serialisers that presses on its CPU paths while (and only while) it runs, and the
        write, an I/O transfer to the store fed by the serialisers (never faster than they make
        bytes; after they are done, from the buffer they filled). A slow WAN or store lengthens the
        write, not the CPU pressure: a thread waiting on I/O is idle."""
        m, net, hr = self.m, self.res.net, self.res.hosts[k]
        gbits = m.ckpt_gbits(frac)
        ser = net.serialize[k]
        weight = self.w.host_ckpt * m.serialize_threads  # each thread presses like the measured one
        holds = [hold(c, weight, "ckpt") for c in hr.cpu_paths()] if weight > 0 else []
        s = net.fabric.start([ser], gbits, 1.0, INF, ("merge", "serialize"))
        t0 = self.env.now
        n = m.serialize_threads
        hr.cpu.begin(n)  # the serialisers are runnable threads of the host (fleet.host_cores, sim.host)
        s.done.callbacks.append(lambda _e: (hr.cpu.end(n), self._host_done(holds, "ckpt", k, t0)))
        store = net.graph.nodes[hr.name]["store"]  # the global store, or its island's (merge.checkpoint_store)
        write = net.fabric.start(self.path(hr.name, store), gbits, 1.0, ser.capacity, ("merge", "ckpt"))
        return [s, write]

    def _host_done(self, holds: list[Job], kind: str, host: int, t0: float) -> None:
        """Merge CPU work on a host ended: its holds go, and `host_work` records how long it pressed."""
        Fabric.release(holds)
        self.host_work.append((kind, host, t0, self.env.now))

    def _async(self, frac: float):
        """DCP's async save: wait for the save in flight, stage the shard to pinned host memory over
        PCIe (blocking: the merge waits for this only), then write in the background."""
        if self.busy:
            yield self._background
        w, gbits = self.w, self.m.ckpt_gbits(frac)
        staged = []
        for hr in self.res.hosts:
            holds = [hold(c, w.host_stage, "ckpt_stage") for c in hr.cpu_paths()] if w.host_stage > 0 else []
            if self.gs.shared:  # the copies press on the GPUs training shares, as the stage phase's do
                holds += self.gs.holds(hr, w.gpu_stage, "ckpt_stage")
            j = hr.pcie.fabric.start([hr.pcie], gbits, 1.0, INF, ("merge", "ckpt_stage"))
            j.done.callbacks.append(lambda _e, hs=holds: Fabric.release(hs))
            staged.append(j.done)
        pending = [e for e in staged if not e.triggered]
        if pending:
            yield self.env.all_of(pending)
        self._background = self.env.process(self._write_behind(frac))
        self._background.callbacks.append(lambda _e: self.bound_changed())  # busy is false from then on

    def _write_behind(self, frac: float):
        pending = [e.done if isinstance(e, Job) else e for e in self.write_all(frac)]
        pending = [e for e in pending if not e.triggered]
        if pending:
            yield self.env.all_of(pending)
