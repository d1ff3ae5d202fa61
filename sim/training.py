"""DiLoCo islands and the coordinator that asks the policy when to merge.

Islands step independently (each step `step_time_s` with Gaussian jitter from the island's own
RNG stream). The first island to finish step k asks the policy about k; nobody has passed k
then, so a "merge at k" reaches every island in time. A planned policy's answers follow from the
step count (Policy.next_merge), so its islands coast: one event takes an island through the steps
before the next planned merge (or the horizon), and their 'no' decisions are booked as they end.
A merge is a barrier: islands stop at k until the last one arrives, then the phases below run
one after another, each made of fabric jobs whose durations emerge from sizes and bandwidths
(sim.merge). `merge.phases` may name a subset; with none a merge is instantaneous (decided,
start = end: the testbed's merges are only timetable windows of a GPU co-tenant, sim.cotenant):

1. stage: each host copies its pseudo-gradient shard GPU -> pinned host over PCIe, pressing on
   the host CPU path (and on the serving GPU when the outer optimizer lives there);
2. allreduce: ring all-reduce of the shards across islands over the network graph;
3. outer: the Nesterov outer step over the host's shard, on a learner GPU (`same_host`) or on
   the sidecar's GPU (`same_gpu`), where it time-slices with serving;
4. ckpt: each host serialises its checkpoint shard (params + outer momentum) and streams it to
   the checkpoint store; serialisation presses on the host CPU path while it lasts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from heapq import heappush

import simpy
from simpy.core import NORMAL

from wadiloco.models.policies.base import NEVER
from wadiloco.models.rng import stream
from wadiloco.models.spec.run import TrainingSpec
from wadiloco.sim.lookahead import unbound

INF = float("inf")


def wake_at(env: simpy.Environment, t: float) -> simpy.Event:
    """An event processed at instant t exactly (a timeout's now + delay may miss t by an ulp)."""
    if t < env.now:
        raise ValueError(f"wake_at({t}) is before now ({env.now})")
    ev = simpy.Event(env)
    ev._ok, ev._value = True, None
    heappush(env._queue, (t, NORMAL, next(env._eid), ev))
    return ev


@dataclass
class MergeRecord:
    index: int
    step: int
    decided_at: float
    start: float = 0.0  # barrier complete, phases begin
    end: float = 0.0
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    running: tuple[str, float] | None = None  # (phase, its start) while a phase runs
    # still running when the run ended (Trainer.merges_at_end): `end` is the run's end, the phase that
    # ran then is cut there, and a merge still waiting at its barrier starts there too (no phases)
    unfinished: bool = False

    @property
    def duration(self) -> float:
        return self.end - self.start


class Trainer:
    """The islands and the coordinator. It is handed what it calls, not the fleet: `decide(step)`
    asks the policy whether to merge at `step`; `run_phase(phase)` runs one merge phase (a SimPy
    generator); `merged(steps)` banks a merge that closed `steps` inner steps (the progress model).
    A lookahead source (sim.lookahead): its next decision and, with `computing`, the next instant an
    island may stop. Observers read it through `view`."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: TrainingSpec,
        seed: int,
        *,
        decide: Callable[[int], bool],
        run_phase: Callable[[str], Generator],
        merged: Callable[[int], None],
        stream_round: Callable[[MergeRecord], Generator] | None = None,
        computing: Callable[[int, bool], None] | None = None,
        plan: Callable[[int, int], int] | None = None,
    ):
        self.env = env
        # plan(step, last_merge_step): the next step the policy merges at, when its answers follow
        # from the step count (models.policies.base Policy.next_merge); then the lookahead bound is
        # that decision, not the next one. Its instant is the same whenever asked until a barrier
        # (step times are drawn ahead), so it is cached per (step, barriers so far).
        self.plan = plan
        self._barriers = 0
        self._plan_at: tuple[tuple[int, int], float] = ((-1, -1), -INF)
        # computing(i, on): island i starts stepping (on) or stops, at a merge barrier or the horizon
        # (sim.gpushare: its inner steps hold the GPU and its learner threads run meanwhile).
        self.computing = computing
        self.phases = spec.phases
        # Streaming DiLoCo (sim.merge.MergeExecutor.stream_round): a merge is a round of fragment
        # syncs that overlap inner steps; no barrier, and the policy is not asked while one runs.
        self.stream = stream_round
        self._streaming = False
        self.decide, self.run_phase, self.merged = decide, run_phase, merged
        self.bound_changed = unbound
        # what the lookahead bound asks: with `computing`, islands stopping at the horizon release the GPU
        self.next_touch_at = self.next_decision_at if computing is None else self._next_decision_or_stop
        self.horizon, self.n_islands = spec.horizon_s, spec.islands
        self.enabled = spec.enabled
        n_islands = spec.islands
        self.step_time, self.jitter = spec.step_time_s, spec.step_jitter
        self.island_step = [0] * n_islands
        self.decided = 0
        self.merge_at = -1
        self._in_merge = False  # its phases run (`_merge`): the islands wait at the barrier
        self.last_merge_step = 0
        self.merges: list[MergeRecord] = []
        self.decisions = 0
        self._arrived = 0
        self._round_done: simpy.Event | None = None
        self.decision_log: list[tuple[int, float, bool]] = []  # (step, time, merge?)
        # Step times are drawn ahead, so the next decision's instant is known before it comes
        # (next_decision_at): island i's queued step times, and when its step in flight ends
        # (-inf while it waits at a merge barrier or has stopped).
        self._rng = [stream(seed, "steps", i) for i in range(n_islands)]
        self._ahead: list[deque[float]] = [deque() for _ in range(n_islands)]
        self._ends = [-INF] * n_islands
        # Planned policies only: the steps island i coasts through in one wait (`_coast`), as
        # (first step, their ends), until it wakes and their decisions are booked (`_catch_up`).
        self._coasts: list[tuple[int, list[float]] | None] = [None] * n_islands
        self.coasting = True  # False: a planned run steps every island step (what tests compare coasting with)
        self.view = TrainingView(self)

    def start(self) -> None:
        """Start the islands' processes (after the monitor's: the order of same-instant events). With
        training off (training.enabled false) none starts: every island has stopped, asks nothing and
        holds nothing."""
        if not self.enabled:
            self._ends = [INF] * self.n_islands
            return
        for i in range(self.n_islands):
            if self.computing is not None:
                self.computing(i, True)
            self.env.process(self._island(i))

    def next_stop_at(self) -> float:
        """A lookahead source (with `computing`): the earliest instant an island may stop computing,
        the end of its first step at or past the horizon. An island whose step in flight ends before
        the horizon says the horizon: its next steps may be short, and one that starts after the
        engines ran ahead must not end (and release the GPU) before the bound they ran to. -inf
        while an island is not stepping; +inf once all have stopped."""
        h, best = self.horizon, INF
        for t in self._ends:
            if t == -INF:
                return -INF
            if t < INF:
                t = t if t >= h else h
                best = t if t < best else best
        return best

    def _next_decision_or_stop(self) -> float:
        t = self.next_decision_at()
        if t == -INF:
            return t
        s = self.next_stop_at()
        return s if s < t else t

    def completed_merges(self) -> list[MergeRecord]:
        return [m for m in self.merges if m.end > 0]

    def merges_at_end(self, now: float) -> list[MergeRecord]:
        """Every merge of the run: the completed ones, then the one still in progress at `now` (the
        run's end), if any, marked `unfinished`: the phases it finished, and the one it was running
        cut at `now` (a merge still waiting at its barrier has none and starts at `now`)."""
        out = self.completed_merges()
        last = self.merges[-1] if self.merges else None
        if last is None or last.end > 0:
            return out
        phases = dict(last.phases)
        if last.running is not None:
            name, t0 = last.running
            phases[name] = (t0, now)
        start = last.start if phases else now
        out.append(MergeRecord(last.index, last.step, last.decided_at, start, now, phases, unfinished=True))
        return out

    def _durations(self, i: int, m: int) -> deque:
        """Island i's queue of step times, holding at least m. Drawn in blocks: one numpy call
        per 256 steps, in stream order, so when a block is drawn never changes a step's time."""
        q = self._ahead[i]
        while len(q) < m:
            q.extend(
                (self.step_time * (1.0 + self.jitter * self._rng[i].standard_normal(256)))
                .clip(0.05 * self.step_time)
                .tolist()
            )
        return q

    def next_decision_at(self) -> float:
        """When the policy is next asked (with a `plan`: next asked and says merge): the first island
        to end step `decided + 1` (the planned step) asks, unless that is past the horizon. -inf
        while a merge is pending or an island is not stepping (the next decision is then not known);
        +inf while its phases run (the merge executor bounds them, and `_merge` calls bound_changed
        as it ends, before the islands step again)."""
        if self.merge_at >= 0:
            return INF if self._in_merge else -INF
        if self._streaming:
            return INF  # not asked until the round ends (which calls bound_changed)
        if self.plan is None:
            return self._first_end(self.decided + 1)
        step = self.plan(self.decided, self.last_merge_step)
        if step >= NEVER:
            return INF
        key = (step, self._barriers)
        if self._plan_at[0] == key:
            return self._plan_at[1]
        t = self._first_end(step)
        if t != -INF:
            self._plan_at = (key, t)
        return t

    def _first_end(self, step: int) -> float:
        """The instant the first island ends inner step `step` (> every island's last), or inf."""
        best = INF
        for i in range(self.n_islands):
            t = self._ends[i]
            if t == -INF:
                return -INF
            if t == INF:
                continue
            m = step - 1 - self.island_step[i]  # steps after the one in flight
            if m:
                q = self._durations(i, m)
                for j in range(m):
                    t = t + q[j]  # as SimPy adds each step's delay to the clock
                    if t >= best:
                        break
            if t < best:
                best = t
        return best if best < self.horizon else INF

    def _island(self, i: int):
        env = self.env
        k = 0
        while True:
            d = self._durations(i, 1).popleft()
            self._ends[i] = env.now + d
            self.bound_changed()
            m = self._coast(i, k)
            if m:  # steps k+1 .. k+m in one wait (they end before the next merge and the horizon)
                yield wake_at(env, self._coasts[i][1][-1])
                q = self._ahead[i]
                for _ in range(m - 1):
                    q.popleft()
                k += m - 1
            else:
                yield env.timeout(d)
            self._ends[i] = -INF
            k += 1
            if self.plan is not None:
                self._catch_up(env.now)
                self._coasts[i] = None
            if env.now >= self.horizon and self.merge_at < k:
                self._ends[i] = INF  # stopped: it asks nothing more
                if self.computing is not None:
                    self.computing(i, False)
                self.bound_changed()
                return  # past the horizon with no merge pending at or ahead of this step
            self.island_step[i] = k
            if k > self.decided and self._streaming:
                self.decided = k  # a streaming round runs: this step is not put to the policy
            elif k > self.decided:
                self.decided = k
                merge = bool(self.decide(k))
                self.decisions += 1
                self.decision_log.append((k, env.now, merge))
                if merge and self.stream is not None:
                    self.merges.append(MergeRecord(len(self.merges), k, env.now))
                    self._streaming = True
                    env.process(self._stream_round(self.merges[-1]))
                elif merge:
                    self.merge_at = k
                    self.bound_changed()
                    self._arrived = 0
                    self._round_done = env.event()
                    self.merges.append(MergeRecord(len(self.merges), k, env.now))
            if self.merge_at == k:
                self._barriers += 1
                self._arrived += 1
                done = self._round_done
                if self.computing is not None:
                    self.computing(i, False)
                if self._arrived == self.n_islands:
                    yield from self._merge(self.merges[-1])
                    done.succeed()
                else:
                    yield done
                if self.computing is not None:
                    self.computing(i, True)

    def _coast(self, i: int, k: int) -> int:
        """How many steps island i, in flight on step k + 1, may take in one wait (0: just this one).
        With a plan and nothing pending, steps that end before the planned merge step and before the
        horizon change nothing anyone reads until they end: the policy's answer to each is 'no' and
        their instants are drawn ahead. The island's state stays that of step k + 1 in flight (so
        `_first_end` adds the same durations as stepping would); `_catch_up` books their decisions.
        The step after them is a timeout of its own, created at the instant stepping creates it."""
        if not self.coasting or self.plan is None or self.stream is not None or self.merge_at >= 0:
            return 0
        last = self.plan(self.decided, self.last_merge_step) - 1  # the planned merge step is stepped
        t, h = self._ends[i], self.horizon
        if k + 2 > last or t >= h:
            return 0
        ends, q, n = [t], self._ahead[i], 0
        while k + 2 + n <= last:
            if n >= len(q):
                self._durations(i, n + 1)
            t2 = t + q[n]
            if t2 >= h:
                break
            ends.append(t2)
            t, n = t2, n + 1
        if not n:
            return 0
        self._coasts[i] = (k + 1, ends)
        return n + 1

    def _catch_up(self, now: float) -> None:
        """Book the decisions of steps coasted through (`_coast`) that some island has ended by
        `now`: each is the policy's 'no', asked by the first island to end it, at that instant."""
        coasts, j = self._coasts, self.decided + 1
        while True:
            best = INF
            for c in coasts:
                if c is not None and c[0] <= j < c[0] + len(c[1]):
                    t = c[1][j - c[0]]
                    best = t if t < best else best
            if best > now:
                return
            self.decided = j
            self.decisions += 1
            self.decision_log.append((j, best, False))
            j += 1

    def _merge(self, rec: MergeRecord):
        env = self.env
        rec.start = env.now
        self._in_merge = True
        for phase in self.phases:
            t0 = env.now
            rec.running = (phase, t0)
            yield from self.run_phase(phase)
            rec.phases[phase] = (t0, env.now)
        rec.running = None
        rec.end = env.now
        self.merged(rec.step - self.last_merge_step)
        self.last_merge_step = rec.step
        self.merge_at = -1
        self._in_merge = False
        self.bound_changed()

    def _stream_round(self, rec: MergeRecord):
        rec.start = self.env.now
        yield from self.stream(rec)
        rec.end = self.env.now
        self.merged(rec.step - self.last_merge_step)
        self.last_merge_step = rec.step
        self._streaming = False
        self.bound_changed()


class TrainingView:
    """What an observer (the monitor) may read of the training run; only the trainer changes it."""

    __slots__ = ("_trainer",)

    def __init__(self, trainer: Trainer):
        self._trainer = trainer

    @property
    def island_step(self) -> Sequence[int]:
        """The last inner step each island completed."""
        return self._trainer.island_step

    @property
    def last_merge_step(self) -> int:
        return self._trainer.last_merge_step

    def _next_decision_or_stop(self) -> float:
        t = self.next_decision_at()
        if t == -INF:
            return t
        s = self.next_stop_at()
        return s if s < t else t

    def completed_merges(self) -> list[MergeRecord]:
        return self._trainer.completed_merges()
