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

from dataclasses import dataclass, field

import simpy

from models.rng import stream

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
        for i in range(self.n_islands):
            self.env.process(self._island(i, stream(fleet.seed, "steps", i)))

    def _island(self, i: int, rng):
        env = self.env
        k = 0
        # Draw in blocks: one numpy call per 256 steps keeps the stream identical and cheap.
        block = []
        while True:
            if not block:
                block = (self.step_time * (1.0 + self.jitter * rng.standard_normal(256))).clip(
                    0.05 * self.step_time).tolist()[::-1]
            yield env.timeout(block.pop())
            k += 1
            if env.now >= self.horizon and self.merge_at < k:
                return  # past the horizon with no merge pending at or ahead of this step
            self.island_step[i] = k
            if k > self.decided:
                self.decided = k
                merge = bool(self.policy.decide(self.f.observe(k, self)))
                self.decisions += 1
                self.decision_log.append((k, env.now, merge))
                if merge:
                    self.merge_at = k
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
