"""The stress harness's sync rules (docs/sources.md, testbed 3.5, `src/wa_diloco/policies.py`), one small class
each, registered by their replay names in `HARNESS_POLICIES`.

A rule only says how each learner votes at the end of a control cycle. The corridor is the
coordinator's (`coordinator_merges`): no merge before `min_h` steps since the last one, a forced merge
at `max_h`, and otherwise a merge only when all learners vote to sync (min_ready 8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np


@dataclass(frozen=True)
class CycleView:
    """What every learner knows when it votes at the end of a control cycle."""

    cycle: int  # 0-based control-cycle index of the run
    round: int  # merges so far
    steps_since_sync: int
    tokens_since_sync: int  # per learner
    staleness_s: float
    network: float
    inference: float
    checkpoint: float
    serving_sync_cost: float  # Stage 13's bursty sidecar only; 0 otherwise
    loss_drop: np.ndarray  # per learner
    uniform: np.ndarray  # per learner, U(0, 1) draws of this cycle (random_deferral)

    @property
    def max_pressure(self) -> float:
        return max(self.network, self.inference, self.checkpoint)


class HarnessPolicy:
    """Base: cycles of 128 steps, corridor 128..512, at most 8 rounds in 32 cycles, 300-s pressure."""

    name: ClassVar[str] = ""
    cycle_steps: ClassVar[int] = 128
    min_h: ClassVar[int] = 128
    max_h: ClassVar[int] = 512
    max_rounds: ClassVar[int] = 8
    max_cycles: ClassVar[int] = 32
    pressure_source: ClassVar[str] = "mixed"  # "mixed": the 3.2 sinusoid; "bursty": Stage 13's sidecar
    reads_pressure: ClassVar[bool] = True  # False: votes never depend on the pressure clock

    def votes(self, view: CycleView) -> np.ndarray:
        raise NotImplementedError


def coordinator_merges(policy: HarnessPolicy, view: CycleView) -> bool:
    """The coordinator's decision: forced at max_h, never before min_h, else unanimous votes."""
    if view.steps_since_sync >= policy.max_h:
        return True
    return view.steps_since_sync >= policy.min_h and bool(np.all(policy.votes(view)))


class FixedH256(HarnessPolicy):
    """Merge every 256 steps: a cycle is one interval, 14 rounds in 14 cycles."""

    name = "fixed_h_256"
    cycle_steps = min_h = max_h = 256
    max_rounds = max_cycles = 14
    reads_pressure = False

    def votes(self, view: CycleView) -> np.ndarray:
        return np.ones(len(view.loss_drop), dtype=bool)


class FixedH512(FixedH256):
    """Merge every 512 steps: 8 rounds in 8 cycles."""

    name = "fixed_h_512"
    cycle_steps = min_h = max_h = 512
    max_rounds = max_cycles = 8


class PressureGate(HarnessPolicy):
    """Sync unless max pressure > threshold (strict)."""

    name = "pressure_gate"
    threshold: ClassVar[float] = 0.6

    def votes(self, view: CycleView) -> np.ndarray:
        return np.full(len(view.loss_drop), view.max_pressure <= self.threshold)


class PressureGateMatched(PressureGate):
    """The same gate at 0.45, meant to defer as often as wa_diloco."""

    name = "pressure_gate_matched"
    threshold = 0.45


class RandomMatched(HarnessPolicy):
    """random_deferral: each learner defers with probability 0.7, so merges are in practice forced."""

    name = "random_matched"
    defer_probability: ClassVar[float] = 0.7
    reads_pressure = False

    def votes(self, view: CycleView) -> np.ndarray:
        return view.uniform >= self.defer_probability


class WaDiloco(HarnessPolicy):
    """Vote when score > 0: 0.5 min(1, loss_drop / 0.05) + 0.5 min(1, tokens / 1e6) minus
    (0.5 network + 0.75 inference + 0.25 checkpoint + 0.25 min(1, staleness_s / 1800))."""

    name = "wa_diloco"
    w_loss: ClassVar[float] = 0.5
    loss_scale: ClassVar[float] = 0.05
    w_tokens: ClassVar[float] = 0.5
    token_scale: ClassVar[float] = 1e6
    w_network: ClassVar[float] = 0.5
    w_inference: ClassVar[float] = 0.75
    w_checkpoint: ClassVar[float] = 0.25
    w_staleness: ClassVar[float] = 0.25
    staleness_scale_s: ClassVar[float] = 1800.0
    w_serving_cost: ClassVar[float] = 0.0

    def penalty(self, view: CycleView) -> float:
        return (
            self.w_network * view.network
            + self.w_inference * view.inference
            + self.w_checkpoint * view.checkpoint
            + self.w_staleness * min(1.0, view.staleness_s / self.staleness_scale_s)
            + self.w_serving_cost * view.serving_sync_cost
        )

    def scores(self, view: CycleView) -> np.ndarray:
        gain = self.w_loss * np.minimum(1.0, view.loss_drop / self.loss_scale)
        gain = gain + self.w_tokens * min(1.0, view.tokens_since_sync / self.token_scale)
        return gain - self.penalty(view)

    def votes(self, view: CycleView) -> np.ndarray:
        return self.scores(view) > 0.0


class OnlineCalibratedWa(WaDiloco):
    """Stage 13: the wa_diloco score plus 1.0 x serving_sync_cost in the penalty, bursty sidecar."""

    name = "online_calibrated_wa"
    w_serving_cost = 1.0
    pressure_source = "bursty"


HARNESS_POLICIES: dict[str, type[HarnessPolicy]] = {
    cls.name: cls
    for cls in (FixedH256, FixedH512, PressureGate, PressureGateMatched, RandomMatched, WaDiloco, OnlineCalibratedWa)
}
