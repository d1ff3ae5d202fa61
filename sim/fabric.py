"""Shared capacity as weighted max-min fair sharing: the one contention mechanism.

A `Fabric` holds `Link`s (a GPU, a host's CPU path, PCIe, a NIC, a WAN link, the checkpoint
store) and `Job`s that each cross one or more links with some amount of work (GPU-seconds,
CPU-seconds, gigabits). Whenever a job starts or ends, rates are re-assigned by progressive
filling (weighted max-min fairness): every link splits what it has left among its unfrozen jobs
in proportion to their weights, the tightest link (or a job's own `max_rate`) freezes first.
So a transfer is bounded by the slowest shared link on its path, and a serving iteration that
shares a GPU with an outer step of weight w runs at 1/(1+w) of full speed. Nothing is slowed by
a rule; a link with `capacity=inf` never constrains anything, which is how tests show that an
unlimited resource removes the interference it causes.

A job with infinite work is a *hold*: it presses on its links until `stop()` (e.g. checkpoint
serialisation keeps the host CPU busy until its CPU work is done, sim.merge).

Hot-path support: a serving engine that finds its links empty runs without submitting jobs and
is the links' `occupant` (one engine per link: each sidecar has its own GPU and CPU links); the
fabric calls the occupant back the moment the job set on such a link changes, at the same
simulated instant, so the engine can hand over the rest of its iteration as ordinary jobs (the
engine ignores calls that come while it is not running on its own). The result is exact, and the
uncontended common case costs no fabric work at all. An unlimited link never calls its occupant:
every job there runs at its own cap whatever else arrives, so nothing the engine computed changes
(and a co-tenant on an unlimited GPU leaves serving bit-identical, sim.cotenant).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import simpy

from wadiloco.models.engine._fast import fabric_core as core

# Links and jobs, and the per-change work over them (compiled with the serving core: models.network.fairshare)
Link, Job, Filling = core.Link, core.Job, core.Filling

INF = math.inf
EPS = 1e-12


class Fabric:
    def __init__(self, env: simpy.Environment, name: str = "fabric", check: bool = False):
        self.env = env
        self.name = name
        self.links: dict[str, Link] = {}
        self.jobs: list[Job] = []
        self._t = env.now
        # re-allocations so far: every change of a link's jobs re-allocates, so a value computed from
        # the jobs on this fabric's links holds while it stays the same (sim.engine Sidecar.speeds)
        self.generation = 0
        self.check = check  # assert capacities on every re-allocation (invariant mode)
        # The instant its next job completes (its timer fires; inf: none), and whom to tell when that
        # instant moves: until then nothing on this fabric changes by itself (sim.merge next_touch_at).
        self.next_at = INF
        self.timer_moved: Callable[[], None] | None = None
        # Jobs its timer finished whose `done` has not been processed yet (their waiters have not run):
        # until they have, what the waiters will do at this instant is still to come (sim.disagg).
        self.unheard = 0
        self._cap = array("d")  # each link's capacity, by Link.idx (models.network.fairshare's input)
        self._peak = array("d")  # and its largest load seen (Link.peak_load)
        self._used = array("d")  # and its allocated rate's integral (Link.used)
        # The jobs as arrays in job order (what a re-allocation reads and writes: no per-job Python
        # work, so a change costs a few ns per job in flight): weight, cap, work left, rate, finish,
        # and the links each crosses, lk[off[j]:off[j + 1]] (models.network.fairshare).
        self._w, self._mr, self._rem, self._rate, self._fin = (array("d") for _ in range(5))
        self._lk, self._off = array("q"), array("q", [0])
        self._filling = Filling()  # (its working arrays, kept from one re-allocation to the next)
        # Each job's serial number (in the order jobs started, so increasing in job order and along
        # every link's `jobs`): a job's place is found by bisection, not by a scan of thousands.
        self._serial: dict[Job, int] = {}
        self._seq = array("q")  # the serial numbers in job order
        self._started = 0
        self._batched = 0  # open `batch` blocks
        self._touched: list[Link] | None = None  # in a batch: the links whose jobs changed (None: none did)

    @property
    def usage(self) -> array:
        """Every link's `used` (capacity-units x s allocated so far), by Link.idx, as of the last
        `advance`: the array itself, to be read, not written."""
        return self._used

    def link(self, name: str, capacity: float) -> Link:
        lk = Link(name, capacity)
        lk.fabric = self
        lk.idx = len(self._cap)
        self._cap.append(capacity)
        self._peak.append(0.0)
        self._used.append(0.0)
        self.links[name] = lk
        return lk

    # -- public API ---------------------------------------------------------------------------
    def start(
        self, links: list[Link], work: float, weight: float = 1.0, max_rate: float = INF, tag: object = None
    ) -> Job:
        """Begin a job; `job.done` fires when its work is done (never, for a hold)."""
        if weight <= 0:
            raise ValueError("weight must be > 0")
        job = Job(links, work, weight, max_rate, self.env.event(), tag, self.env.now)
        self.advance()
        if work <= 0:
            job.done.succeed(job)
            return job
        if any(lk.fabric is not self for lk in links):  # (Job.lidx indexes this fabric's arrays)
            raise ValueError(f"job {tag!r}: a link is not on fabric {self.name}")
        self.jobs.append(job)
        job.fabric = self
        self._w.append(weight)
        self._mr.append(max_rate)
        self._rem.append(work)
        self._rate.append(0.0)
        self._fin.append(INF)
        self._lk.extend(job.lidx)
        self._off.append(len(self._lk))
        self._serial[job] = self._started
        self._seq.append(self._started)
        self._started += 1
        for lk in links:
            lk.jobs.append(job)
        self._changed(links)
        return job

    @contextmanager
    def batch(self) -> Iterator[Fabric]:
        """Jobs started and stopped inside re-allocate once, at the end (a merge phase starts its
        flows together): the allocations in between would last no time, and nothing reads them (no
        SimPy event runs inside; an engine reads its links' speeds in its own process). So the rates,
        timers and occupants' calls are those of re-allocating after each one, and peak loads count
        only allocations that last."""
        self._batched += 1
        try:
            yield self
        finally:
            self._batched -= 1
            if not self._batched and self._touched is not None:
                links, self._touched = self._touched, None
                self._reallocate()
                self._notify(links)

    def _changed(self, links) -> None:
        """The job set on `links` changed: re-allocate and tell their occupants, now or at the batch's end."""
        if self._batched:
            if self._touched is None:
                self._touched = []
            self._touched.extend(links)
            return
        self._reallocate()
        self._notify(links)

    @staticmethod
    def _notify(links) -> None:
        for lk in links:
            occ = lk.occupant
            if occ is not None and lk.capacity != INF:
                occ()

    @staticmethod
    def hold_share(lk: Link, weight: float = 1.0, max_rate: float = 1.0) -> float | None:
        """Rate a new job would get on `lk` if every job there is a hold (infinite work) on this
        link alone; None otherwise. While holds are all there is, this rate stays constant until
        the link's job set changes (and the occupant is told), so a serving engine can run at it
        without joining the fabric."""
        if lk.capacity == INF or not lk.jobs:
            return max_rate if max_rate < INF else None
        ws, caps = [weight], [max_rate]
        for j in lk.jobs:
            if j.work != INF or len(j.links) != 1:
                return None
            ws.append(j.weight)
            caps.append(j.max_rate)
        # water-filling on one link
        left, wsum = lk.capacity, sum(ws)
        order = sorted(range(len(ws)), key=lambda i: caps[i] / ws[i])
        for i in order:
            level = left / wsum
            if caps[i] / ws[i] <= level:
                if i == 0:
                    return caps[0]
                left -= caps[i]
                wsum -= ws[i]
            else:
                return weight * level
        return weight * left / wsum if wsum > 0 else max_rate

    @staticmethod
    def release(jobs) -> None:
        """Stop holds, each on its own fabric."""
        for j in jobs:
            j.links[0].fabric.stop(j)

    def stop(self, job: Job) -> None:
        """End a job early (a hold, or a cancelled transfer)."""
        if job.fabric is not self:
            return
        self.advance()
        self._remove(job)
        self._changed(job.links)

    def utilisation(self, lk: Link) -> float:
        """Current allocated rate over capacity (0 for an unlimited link)."""
        if lk.unlimited:
            return 0.0
        return sum(j.rate for j in lk.jobs) / lk.capacity

    # -- mechanics ----------------------------------------------------------------------------
    def state(self, job: Job) -> tuple[float, float, float]:
        """(work left, rate, finish instant) of a job on this fabric (Job.remaining, .rate, .finish)."""
        i = self._place(job)
        return self._rem[i], self._rate[i], self._fin[i]

    def _remove(self, job: Job, left: float | None = None) -> None:
        """Job leaves: its values go with it (its work left: `left` if given)."""
        i = self._place(job)
        job.leave(self._rem[i] if left is None else left, self._rate[i], self._fin[i])
        del self.jobs[i], self._w[i], self._mr[i], self._rem[i], self._rate[i], self._fin[i], self._seq[i]
        a, b = self._off[i], self._off[i + 1]
        del self._lk[a:b], self._off[i + 1]
        if i + 1 < len(self._off):  # (jobs after it)
            core.shift(self._off, i + 1, a - b)
        serial, key = self._serial[job], self._serial.__getitem__
        for lk in job.links:  # (its first entry there: a link it crosses twice holds it twice)
            del lk.jobs[bisect_left(lk.jobs, serial, key=key)]
        del self._serial[job]

    def _place(self, job: Job) -> int:
        """Its index in job order (by its serial number)."""
        return bisect_left(self._seq, self._serial[job])

    def advance(self) -> None:
        """Bring every job's remaining work and every link's `used` up to now (rates are constant
        between re-allocations, so this changes no result; an observer calls it before reading)."""
        now = self.env.now
        dt = now - self._t
        if dt > 0 and self.jobs:  # (an empty fabric has nothing to bring up)
            core.advance(self._rem, self._rate, self._lk, self._off, self._used, dt)
        self._t = now

    def _reallocate(self) -> None:
        """Progressive filling (models.network.fairshare: its float operations, their order and tie-breaks are
        the plain statement's, which tests/network/test_fabric.py keeps bit-identical), then each job's finish
        and the timer of the next one. The links' peak loads are raised there too."""
        jobs = self.jobs
        now = self.env.now
        nxt = INF
        if len(jobs) == 1 and len(jobs[0].links) == 1:  # (most calls: a hold on a GPU or a CPU path)
            j = jobs[0]
            w, link = j.weight, j.links[0]
            cap, c = link.capacity, j.max_rate / w
            # fair_share's one round, operation for operation: level min(cap / (0.0 + w), c), c wins ties
            best = cap / (0.0 + w)
            self._rate[0] = r = w * (c if c <= best else best)
            if cap != INF and r / cap > self._peak[link.idx]:
                self._peak[link.idx] = r / cap
            self._fin[0] = nxt = core.due(r, self._rem[0], now)
        elif jobs:
            self._filling.share(self._cap, self._lk, self._off, self._w, self._mr, self._rate, self._peak)
            nxt = core.finishes(self._rate, self._rem, self._fin, now)
        if self.check:
            self.assert_capacities()
        self.generation += 1
        was = self.next_at
        if nxt < INF:
            gen = self.generation
            delay = max(0.0, nxt - now)
            self.next_at = now + delay  # (the very float SimPy fires the timer at)
            ev = self.env.timeout(delay)
            ev.callbacks.append(lambda _e, g=gen: self._on_timer(g))
        else:
            self.next_at = INF
        if self.timer_moved is not None and self.next_at != was:
            self.timer_moved()

    def _on_timer(self, gen: int) -> None:
        if gen != self.generation:
            return
        self.advance()
        now = self.env.now
        finished = [self.jobs[i] for i in core.due_by(self._fin, now + EPS * max(1.0, now))]
        for j in finished:
            self._remove(j, 0.0)
        self._reallocate()
        for j in finished:
            j.done.succeed(j)
            j.done.callbacks.append(self._heard)  # (after its waiters)
        self.unheard += len(finished)

    def _heard(self, _done) -> None:
        self.unheard -= 1

    def assert_capacities(self) -> None:
        total = [0.0] * len(self._cap)  # each link's jobs' rates, summed in job order
        for j in range(len(self.jobs)):
            for t in range(self._off[j], self._off[j + 1]):
                total[self._lk[t]] += self._rate[j]
        for lk in self.links.values():
            if not lk.unlimited and total[lk.idx] > lk.capacity * (1 + 1e-9) + 1e-12:
                raise AssertionError(f"{self.name}/{lk.name}: allocated {total[lk.idx]} > capacity {lk.capacity}")
