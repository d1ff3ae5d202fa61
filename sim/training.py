"""DiLoCo islands, the coordinator that asks the policy, and the merge that holds real resources.

Islands step independently (each step `step_time_s` with Gaussian jitter from the island's own
RNG stream). The first island to finish step k asks the policy about k; nobody has passed k
then, so a "merge at k" reaches every island in time. A merge is a barrier: islands stop at k
until the last one arrives, then four fleet-wide phases run one after another, each made of
fabric jobs whose durations emerge from sizes and bandwidths:

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
from dataclasses import dataclass, field

import simpy

from wadiloco.models.rng import stream

INF = float("inf")

PHASES = ("stage", "allreduce", "outer", "ckpt")


@dataclass
class MergeRecord:
    index: int
    step: int
    decided_at: float
    start: float = 0.0  # barrier complete, phases begin
    end: float = 0.0
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.end - self.start


class Trainer:
    def __init__(self, fleet, policy, horizon_s: float):
        self.f = fleet
        sc = fleet.sc
        self.env: simpy.Environment = fleet.env
        self.policy = policy
        self.horizon = horizon_s
        self.n_islands = sc.fleet.islands
        self.step_time = sc.training.step_time_s
        self.jitter = sc.training.step_jitter
        self.island_step = [0] * self.n_islands
        self.decided = 0
        self.merge_at = -1
        self.last_merge_step = 0
        self.merges: list[MergeRecord] = []
        self.decisions = 0
        self._arrived = 0
        self._round_done: simpy.Event | None = None
        self.decision_log: list[tuple[int, float, bool]] = []  # (step, time, merge?)
        # Step times are drawn ahead, so the next decision's instant is known before it comes
        # (next_decision_at): island i's queued step times, and when its step in flight ends
        # (-inf while it waits at a merge barrier or has stopped).
        self._rng = [stream(fleet.seed, "steps", i) for i in range(self.n_islands)]
        self._ahead: list[deque[float]] = [deque() for _ in range(self.n_islands)]
        self._ends = [-INF] * self.n_islands
        for i in range(self.n_islands):
            self.env.process(self._island(i))

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
        """When the policy is next asked: the first island to end step `decided + 1` asks, unless
        that is past the horizon. -inf while a merge is pending or running, or an island is not
        stepping (the next decision is then not known)."""
        if self.merge_at >= 0:
            return -INF
        best = INF
        for i in range(self.n_islands):
            t = self._ends[i]
            if t == -INF:
                return -INF
            if t == INF:
                continue
            m = self.decided - self.island_step[i]  # steps after the one in flight
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
            self.f.bound_changed()
            yield env.timeout(d)
            self._ends[i] = -INF
            k += 1
            if env.now >= self.horizon and self.merge_at < k:
                self._ends[i] = INF  # stopped: it asks nothing more
                self.f.bound_changed()
                return  # past the horizon with no merge pending at or ahead of this step
            self.island_step[i] = k
            if k > self.decided:
                self.decided = k
                merge = bool(self.policy.decide(self.f.observe(k, self)))
                self.decisions += 1
                self.decision_log.append((k, env.now, merge))
                if merge:
                    self.merge_at = k
                    self.f.bound_changed()
                    self._arrived = 0
                    self._round_done = env.event()
                    self.merges.append(MergeRecord(len(self.merges), k, env.now))
            if self.merge_at == k:
                self._arrived += 1
                done = self._round_done
                if self._arrived == self.n_islands:
                    yield from self._merge(self.merges[-1])
                    done.succeed()
                else:
                    yield done

    def _merge(self, rec: MergeRecord):
        env = self.env
        rec.start = env.now
        for phase in PHASES:
            t0 = env.now
            yield from self.f.run_phase(phase)
            rec.phases[phase] = (t0, env.now)
        rec.end = env.now
        self.f.progress.record_merge(rec.step - self.last_merge_step)
        self.last_merge_step = rec.step
        self.merge_at = -1
        self.f.bound_changed()
