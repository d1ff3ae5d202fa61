"""A host's cores as fabric links: the API for CPU work, the runnable threads, and preemption.

`HostCpu.work(core_s, threads, press)` is how merge work asks for CPU (checkpoint serialisation as
bytes / per-core rate, compression, ...): `core_s` core-seconds on the host's `cores` link at up to
`threads` cores, done when the work is. The cores are shared by weighted max-min fairness, one weight
per thread, with every other runnable thread (a standing job of the engines', frontends' and, while
their island steps, the learners' threads). While the work runs it presses on every engine and
frontend CPU path with weight `press` (the memory/launch-path pressure measured for that kind of
work, models.training.interference; 0 for pure compute, like the calibration's `cpu` row).

Without `fleet.host_cores` the cores are unlimited: CPU work runs at `threads` cores and nothing is
ever preempted (today's host). With it, whenever more threads are runnable than there are cores, each
engine and frontend thread is preempted at the rate of models.training.host.Oversubscription, and each
preemption is a hold on its CPU path that leaves it PREEMPTED_SHARE of its core for a wait drawn
from the host's own random stream: the calibration `cpu` row's tail emerges from these waits.
`fleet.unlimited: [host]` makes the cores and paths unlimited and so removes both.
"""

from __future__ import annotations

from collections.abc import Callable

from wadiloco.models.rng import stream
from wadiloco.models.spec.run import FleetSpec
from wadiloco.models.training.host import default_oversubscription
from wadiloco.sim.fabric import INF, Fabric, Job, Link

# A preempted thread's weight on its own CPU path: it keeps 1/(1 + 1e6) of its core while it waits.
PREEMPTED = 1.0e6


class Preempter:
    """Preemptions of one latency-critical thread (its CPU path link): off, then on for a wait, at
    the rate it is given. Switch instants are drawn ahead, so `next_switch_at` is known (lookahead)."""

    def __init__(self, env, link: Link, rng, wait_s: float, bound_changed: Callable[[], None]):
        self.env, self.link, self.rng, self.wait_s = env, link, rng, wait_s
        self.bound_changed = bound_changed
        self.rate = 0.0
        self.hold: Job | None = None
        self.next = INF
        self.count = 0  # preemptions so far
        self._gen = 0

    def set_rate(self, rate: float) -> None:
        """A new preemption rate (the runnable count changed); a wait in progress runs out."""
        self.rate = rate
        if self.hold is None:
            self._plan(self.env.now + self.rng.exponential(1.0 / rate) if rate > 0 else INF)

    def _plan(self, t: float) -> None:
        self.next = t
        self._gen += 1
        if t < INF:
            gen = self._gen
            self.env.timeout(t - self.env.now).callbacks.append(lambda _e: self._switch(gen))
        self.bound_changed()

    def _switch(self, gen: int) -> None:
        if gen != self._gen:
            return
        lk = self.link
        if self.hold is None:
            self.count += 1
            self.hold = lk.fabric.start([lk], INF, PREEMPTED, 1.0, ("preempt", lk.name))
            self._plan(self.env.now + self.rng.exponential(self.wait_s))
        else:
            lk.fabric.stop(self.hold)
            self.hold = None
            self._plan(self.env.now + self.rng.exponential(1.0 / self.rate) if self.rate > 0 else INF)


class HostCpu:
    """One host's cores: a `cores` link (its own fabric), the runnable threads and, with a core
    count, one Preempter per engine and frontend CPU path."""

    def __init__(self, env, name: str, fc: FleetSpec, paths: list[Link], n_engines: int, check: bool, seed: int):
        self.env = env
        self.n = fc.cores
        self.cores = Fabric(env, f"{name}/cores", check).link("cores", INF if self.n is None else float(self.n))
        self.paths = paths
        fronts = len(paths) - n_engines  # frontend paths follow the engines' (HostRes.cpu_paths)
        self._standing = fc.engine_threads * n_engines + fc.frontend_threads * fronts
        self._learners = 0
        self._work = 0  # threads of CPU work running
        self._fg: Job | None = None
        self._fg_threads = -1
        self._running: dict[int, tuple[list[Job], int]] = {}  # id(job): (its press holds, its threads)
        self.bound_changed: Callable[[], None] = lambda: None
        self.law = default_oversubscription()
        self.preempters = [
            Preempter(env, lk, stream(seed, "preempt", name, k), self.law.wait_s, self._changed)
            for k, lk in enumerate(paths)
            if self.n is not None
        ]
        self._update()

    def _changed(self) -> None:
        self.bound_changed()

    @property
    def runnable(self) -> int:
        return self._standing + self._learners + self._work

    def work(self, core_s: float, threads: int, press: float = 0.0, tag: object = ("merge", "cpu")) -> Job:
        """CPU work of `core_s` core-seconds over `threads` threads (infinite: a load until `stop`)."""
        if threads < 1:
            raise ValueError("CPU work needs at least one thread")
        holds = [lk.fabric.start([lk], INF, press, 1.0, ("hold", tag)) for lk in self.paths] if press > 0 else []
        job = self.cores.fabric.start([self.cores], core_s, float(threads), float(threads), tag)
        if not job.done.triggered:
            self._running[id(job)] = (holds, threads)
            self._work += threads
            self._update()
            job.done.callbacks.append(lambda _e: self._ended(job))
        else:
            Fabric.release(holds)
        return job

    def stop(self, job: Job) -> None:
        """End CPU work early (a load started with infinite work)."""
        if job in self.cores.jobs:
            self.cores.fabric.stop(job)
            self._ended(job)

    def _ended(self, job: Job) -> None:
        holds, threads = self._running.pop(id(job))
        Fabric.release(holds)
        self._work -= threads
        self._update()

    def begin(self, threads: int) -> None:
        """CPU work modelled elsewhere (checkpoint serialisation on its own link, sim.merge) starts
        `threads` runnable threads here; `end` when it is done."""
        self._work += threads
        self._update()

    def end(self, threads: int) -> None:
        self._work -= threads
        self._update()

    def learners(self, threads: int) -> None:
        """The learner threads now stepping on this host (their island computes; 0 at a barrier)."""
        self._learners = threads
        self._update()

    def next_switch_at(self) -> float:
        """A lookahead source: the next instant a preemption starts or ends on this host."""
        return min((p.next for p in self.preempters), default=INF)

    def _update(self) -> None:
        fg = self._standing + self._learners
        if fg != self._fg_threads:
            if self._fg is not None:
                self.cores.fabric.stop(self._fg)
            self._fg = self.cores.fabric.start([self.cores], INF, float(fg), float(fg), ("threads",)) if fg else None
            self._fg_threads = fg
        if self.n is not None:
            rate = self.law.rate(self.runnable, self.n)
            for p in self.preempters:
                if p.rate != rate:
                    p.set_rate(rate)
