"""One vLLM-like serving sidecar on SimPy: the clock, the lookahead bound, interrupts and the fabric.

What the engine does (admission, chunked prefill, closed-form decode runs, booking) is
models/engine/serving.py, SimPy-free; its coroutine `serve` is the sidecar's SimPy process, and the
`Sidecar` is the `Clock` it runs on. An iteration needs GPU work g, host work h and (with a
frontend link) frontend work f, at the same time (overlapped) or one after the other (sequential:
h, g, f; docs/engine.md); it ends when all are done.

Fast path: when the engine's GPU and host links carry no other job, an iteration takes exactly
max(h, g) and needs no fabric work; when only merge holds press on them, it runs at their
constant share (Fabric.hold_share). With `fast_forward`, a whole run of pure-decode iterations
(until the next completion, or the next arrival that could be admitted) is one timeout. If merge
work lands on the GPU or host link mid-step, the fabric calls the occupant (`_wake`), which
interrupts the engine at that instant; it books the iterations already finished and submits the
rest of the current one as fabric jobs (`shared`), which then share the link with the merge.

Lookahead: between merges nothing else touches the engine's links, and nothing reads its state
except at known instants (the policy's next decision, the monitor's next sample: `Lookahead`).
Steps that end before then are booked without a SimPy event; the engine keeps its own clock
and yields only for the step that crosses that instant. Results are bit-identical either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from wadiloco.models.engine._fast import (  # compiled or pure (models/engine/_fast/__init__.py)
    EngineState,
    delay_to,
    serve,
)
from wadiloco.models.engine.batching import TODAYS_STEP, EngineStep
from wadiloco.models.engine.kv import KVPool
from wadiloco.models.engine.laws import LatencyLaw
from wadiloco.models.engine.prefix import PrefixCache
from wadiloco.sim.fabric import Fabric, Link

__all__ = ["Lookahead", "Sidecar", "delay_to"]

hold_share = Fabric.hold_share


class Lookahead:
    """The instant before which nothing outside the engines will look at them or put work on their
    links (the fleet keeps it: sim.fleet.Fleet.bound_changed). A step that ends before it is
    booked at once, without a SimPy event: every later event sees the same state at the same
    instant as if the engine had yielded. -inf (the default) turns this off."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = -math.inf


class Sidecar:
    """A sidecar engine: its state (`core`, models.engine.serving.EngineState) and its SimPy process
    (`proc`, models.engine.serving.serve), for which it is the models.engine.serving.Clock. `clock` is the
    instant the state is as of, never after env.now when anything observes it; `iter_log`, set
    to a list by sim/probe.py before the run, gets (start, end) per step."""

    Cut = simpy.Interrupt

    def __init__(
        self,
        env: simpy.Environment,
        idx: int,
        arrivals,
        lat: LatencyLaw,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        host_s: float,
        gpu: Link,
        host: Link,
        fast_forward: bool = True,
        lookahead: Lookahead | None = None,
        step: EngineStep = TODAYS_STEP,
        front: Link | None = None,
        client=None,
        kv: KVPool | None = None,
        prefix: PrefixCache | None = None,
        pcie: Link | None = None,
        block_bytes: int = 0,
        limits: tuple[bool, int, float, bool] = (False, 0, math.inf, False),
    ):
        self.env = env
        self.idx = idx
        self.core = core = EngineState(
            arrivals.t,
            arrivals.prompt,
            arrivals.output,
            lat,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            host_s=host_s,
            step=step,
            kv=kv,
            prefix=prefix,
            hashes=getattr(arrivals, "hashes", None) if prefix is not None else None,
            lag=limits[0],
            max_len=limits[1],
            patience=limits[2],
            pooled=limits[3],
        )
        if step.frontend and front is None:
            raise ValueError("an engine with frontend work needs a frontend link")
        self._requests(arrivals, client)
        self._links(gpu, host, front, pcie, block_bytes)
        self.wait = env.timeout
        # The engine stays its links' occupant for good; `interruptible` says whether a call from
        # the fabric finds it in a wait it can cut short.
        self.interruptible = False
        self.on_cut: Callable[[], None] | None = None  # told when a run in flight is cut short (sim.disagg)
        self.la = lookahead or Lookahead()
        self.proc = env.process(serve(core, self, self.la, fast_forward))

    def _requests(self, arrivals, client) -> None:
        """The arrival times and per-request results as the sidecar reads them, and the queries."""
        core = self.core
        # The arrival times: the workload's own array, or (closed loop: models.workload.clients) the engine's,
        # which grows as the client creates requests.
        self.t_arr = arrivals.t
        # Per-request results; a closed loop's arrays grow (reallocated), so read them by `results()`.
        self.admitted, self.first_token, self.finish = core.admitted, core.first_token, core.finish
        if client is not None:
            core.attach(client)
            self.t_arr = core.t_arr
            self.admitted = self.first_token = self.finish = None
        self.client = client
        # queries on the present state: queue_len(now), running(), counts(now) (models.engine.serving)
        self.queue_len, self.running, self.counts = core.queue_len, core.running, core.counts

    def _links(self, gpu: Link, host: Link, front: Link | None, pcie: Link | None, block_bytes: int) -> None:
        """The fabric links the engine's work runs on, which it occupies (their fabric calls `_wake`)."""
        self.gpu, self.host, self.front = gpu, host, front
        # swap preemption's copies (KV blocks of block_bytes each) cross the host's PCIe link
        self.pcie, self.block_gbits = pcie, block_bytes * 8 / 1e9
        if self.core.kv is not None and self.core.kv.swap and pcie is None:
            raise ValueError("swap preemption needs the host's PCIe link")
        self.gpu_jobs, self.host_jobs = gpu.jobs, host.jobs  # mutated in place by the fabric, never replaced
        # speeds() as of its links' fabrics' generations (Fabric.generation; the engine asks at every
        # step while jobs press on its links, and the answer changes only with those jobs)
        links = (gpu, host) if front is None else (gpu, host, front)
        fabrics = list(dict.fromkeys(lk.fabric for lk in links))  # (usually one: the host's)
        self._fabrics = fabrics if None not in fabrics else None
        self._speeds_at: list[int] | None = None
        self._speeds = (1.0, 1.0, 1.0)
        gpu.occupant = host.occupant = self._wake
        if front is not None:
            front.occupant = self._wake

    # -- observation (present state only) -------------------------------------------------------
    def results(self) -> tuple:
        """(admitted, first_token, finish) of every request so far."""
        c = self.core
        return c.admitted[: c.n], c.first_token[: c.n], c.finish[: c.n]

    @property
    def clock(self) -> float:
        return self.core.now

    @property
    def iterations(self) -> int:
        return self.core.diter

    @property
    def contended_iterations(self) -> int:
        """Iterations run below full speed or as fabric jobs."""
        return self.core.contended

    @property
    def iter_log(self) -> list[tuple[float, float]] | None:
        return self.core.log

    @iter_log.setter
    def iter_log(self, log: list[tuple[float, float]] | None) -> None:
        self.core.log = log
        self.core.slow = self.core.slow or log is not None  # (the engine books a logged step in _book_slow)
        if log is not None:
            self.core.tape = None  # every step is logged, so none is copied from a tape (models.engine.tape)

    # -- the Clock the engine runs on --------------------------------------------------------------
    def wake(self) -> None:
        """Cut a run in flight short now (its state changed from outside: merge memory, sim.build)."""
        self._wake()

    def _wake(self) -> None:
        if self.interruptible:
            self.interruptible = False
            self.proc.interrupt()
            if self.on_cut is not None:
                self.on_cut()

    def now(self) -> float:
        return self.env.now

    def speeds(self) -> tuple[float | None, float | None, float | None]:
        """1 on a link alone, a constant share when only merge holds press on it, None when
        finite jobs share it (the fabric decides)."""
        at = [f.generation for f in self._fabrics] if self._fabrics is not None else None
        if at is not None and at == self._speeds_at:
            return self._speeds
        gpu, host, front = self.gpu, self.host, self.front
        rf = 1.0 if front is None or not front.jobs else hold_share(front)
        sp = (hold_share(gpu) if gpu.jobs else 1.0), (hold_share(host) if host.jobs else 1.0), rf
        if at is not None:
            self._speeds_at, self._speeds = at, sp
        return sp

    def _job(self, link: Link | None, work: float):
        return link.fabric.start([link], work, 1.0, 1.0, ("serve", self.idx)) if work > 0 else None

    def copy(self, blocks: int):
        link = self.pcie
        if link.capacity == math.inf:  # fleet.unlimited: [pcie]: the copy takes no time
            return
        yield link.fabric.start([link], blocks * self.block_gbits, 1.0, math.inf, ("serve", self.idx)).done

    def shared(self, g: float, h: float, f: float, sequential: bool):
        if sequential:  # schedule, GPU step, output processing
            for link, work in ((self.host, h), (self.gpu, g), (self.front, f)):
                job = self._job(link, work)
                if job is not None:
                    yield job.done
            return
        jobs = [self._job(self.gpu, g), self._job(self.host, h), self._job(self.front, f)]
        for job in jobs:
            if job is not None:
                yield job.done
