"""A simulated run of the paper's DiLoCo stress harness (docs/sources.md, testbed 3.5): the coordinator's
event log (coordinator_start, control_cycle, merged, coordinator_stop) for a policy and a seed.

The traces it rebuilds are replay INPUTS of Stages 11-13 (their merge times were never released);
their merge counts and lengths D (3.5's table, `TRACE_LENGTHS`) are matched, nothing else.

Known (3.5): 8 learners (one per B200), SmolLM2-135M, 2048 tokens per learner-step; the coordinator
polls every 2 s and merges only when all 8 learners vote to sync; fixed_h_256 merges every 256 steps
(14 rounds), fixed_h_512 every 512 (8 rounds); the others run control cycles of 128 steps, merge after
at least 128 and at most 512 steps (forced), at most 8 rounds in 32 cycles. Training-time pressure is
the 3.2 formulas with a 300-s period, published every 5 s; Stage 13 (online_calibrated_wa) ran the
sidecar in bursty mode instead: the 2.6 bursty labels plus serving_sync_cost, the busy share of the
next 8 s of the 120/30/0 timetable. Every learner reads the same pressure.

Assumptions (each a `HarnessParams` field, so a sensitivity table can vary it):
1. Structure. A control cycle is `cycle_steps` steps of `step_s` each, then a boundary of `boundary_s`
   (report, the 2-s poll, the vote, and a merge if there is one); a merge adds `merge_s` = 0. For
   fixed_h a cycle is H steps (3.5: "14 rounds in 14 cycles"). The run stops at its last round (8,
   or 14): pressure_gate's D (267-303 s) is below fixed_h_512's (324-375 s, the same 4096 steps in
   8 rounds), so it cannot run on to 32 cycles. coordinator_stop follows the last merge after
   `stop_tail_s` = 0, so D = last merge + 8 s (3.4). `startup_s` = 0 (learners start at
   coordinator_start). The 2-s poll is not modelled on its own: it is inside `boundary_s`.
2. Boundary cost. fixed_h_512 and random_matched run the same 4096 steps and 8 merges (random's
   merges are forced at 512, 0.3^8 per cycle otherwise) but 8 against 32 boundaries, so with one step
   time for both, boundary_s = (mean D_random - mean D_fixed512) / 24 = (584.558 - 353.250) / 24 =
   9.638 s; the step time is then (353.250 - 8 - 8 x 9.638) / 4096 = 65.47 ms (`REFERENCE_STEP_S`).
   It predicts fixed_h_256's mean D (376.464) as 377.5 s. Merge and non-merge boundaries cost the
   same: the data cannot separate a merge duration from the boundary wait.
3. Pressure clock. The learner reads, at the end of a cycle's steps (coordinator time t), the value
   the sidecar last published: sidecar time floor((t + offset) / 5) * 5, offset >= 0 because the
   sidecar starts first (3.5). Default offset 0; the fit moves it only if it must (below).
4. Loss drop. Unknown, and it drives wa_diloco's vote. A constant 0 makes both wa policies sync
   every two or three cycles in quiet time, and the fit then needs 79-117 ms steps for wa_diloco and
   142-172 ms for online_calibrated_wa; their D (502-623 s) sits next to random_matched's instead:
   they are mostly forced at 512. We take each learner's loss drop per cycle as
   Normal(`loss_drop_mean` = 0, `loss_drop_sd`), drawn per (cycle, learner): a plateaued pretrained
   model whose loss difference between two 128-step means is sampling noise, so the unanimous vote
   rarely passes early. sd = 0.015 is fitted once for all cells: of 0, 0.005, ..., 0.03 it puts the
   median fitted step time of the ten wa cells (63.7 ms) nearest the median of the fixed and forced
   cells (65.5 ms); 0.01 gives 74.7, 0.02 gives 61.9.
5. Random streams: `wadiloco.models.rng.stream(seed, "testbed.harness", policy, what)`, one matrix
   of draws indexed by (cycle, learner), so draws never depend on timing. random_deferral: learner
   defers when its uniform draw < 0.7 (the artifact's own rng, from seed/learner/cycle/round, is not
   reproduced).

The fit (`harness_fit.fit_step_time`): per (policy, seed), the step time is solved so that D is
reproduced to 1 ms. Given the cycle count n, D = startup + n (C step + boundary) + merges * merge_s +
max(tail, 8) is linear in the step time; every n is tried, solved exactly, re-simulated, and kept
when the run really takes n cycles (self-consistent). Of those, the step time nearest
REFERENCE_STEP_S wins. If no n is self-consistent at the given offset, the offset is advanced 1 s at
a time (at most one pressure cycle) until one is; pressure-blind policies never need this.

What the fit shows (defaults): fixed and forced cells need 57.7-75.1 ms steps, the wa cells 49-82 ms,
but pressure_gate needs 81-134 ms and pressure_gate_matched 34-104 ms. From clock phase 0 a 300-s
sinusoid defers too little within ~290 s for a 65-ms step; offsets that bring the checkpoint quarter
(pressure clock 900-1200 s) near the run's start fit 58-75 ms too. Nothing in the artifact says which
offset is true, so it stays 0 by default and is a sensitivity parameter.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wadiloco.models.rng import stream
from wadiloco.models.testbed.harness_policies import HARNESS_POLICIES, CycleView, HarnessPolicy, coordinator_merges
from wadiloco.models.testbed.pressure import BUSY_LABELS, QUIET_LABELS, pressure_values
from wadiloco.models.timetables import WINDOW_S, Timetable, bursty, trace_from_events

__all__ = ["HARNESS_POLICIES", "HarnessParams", "HarnessRun", "TrainingSidecar", "run_harness", "write_events"]

SEEDS = (23, 29, 31, 37, 41)
# 3.5's table (`sync_trace_duration_sec` of the Stage 11/13 summaries), seeds 23/29/31/37/41.
TRACE_LENGTHS: dict[str, tuple[float, ...]] = {
    "fixed_h_256": (358.515, 355.947, 412.008, 362.308, 393.540),
    "fixed_h_512": (323.689, 353.321, 354.143, 375.058, 360.041),
    "pressure_gate": (288.387, 300.774, 267.502, 303.347, 302.103),
    "pressure_gate_matched": (291.595, 395.056, 298.906, 245.163, 444.973),
    "random_matched": (611.300, 552.717, 567.740, 579.497, 611.536),
    "wa_diloco": (544.856, 526.672, 502.312, 622.979, 511.768),
    "online_calibrated_wa": (511.742, 522.733, 546.819, 508.929, 525.210),
}
MERGE_COUNTS = {name: (14 if name == "fixed_h_256" else 8) for name in TRACE_LENGTHS}
BOUNDARY_S = 9.638  # assumption 2
REFERENCE_STEP_S = 0.06547  # assumption 2


@dataclass(frozen=True)
class HarnessParams:
    """Everything the harness run assumes; see the module docstring for where each default comes from."""

    step_s: float = REFERENCE_STEP_S
    boundary_s: float = BOUNDARY_S
    merge_s: float = 0.0
    startup_s: float = 0.0
    stop_tail_s: float = 0.0
    pressure_offset_s: float = 0.0
    pressure_period_s: float = 300.0
    pressure_update_s: float = 5.0
    loss_drop_mean: float = 0.0
    loss_drop_sd: float = 0.015
    learners: int = 8
    tokens_per_step: int = 2048
    burst_period_s: float = 120.0
    burst_window_s: float = 30.0
    burst_phase_s: float = 0.0
    sync_window_s: float = WINDOW_S

    def __post_init__(self):
        positive = ("step_s", "pressure_period_s", "pressure_update_s", "burst_period_s", "sync_window_s")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("boundary_s", "merge_s", "startup_s", "stop_tail_s", "pressure_offset_s", "loss_drop_sd"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.learners < 1 or self.tokens_per_step < 1:
            raise ValueError("learners and tokens_per_step must be >= 1")


@dataclass(frozen=True, eq=False)
class HarnessRun:
    """One simulated harness run: the coordinator's event log and what it adds up to."""

    policy: str
    seed: int
    params: HarnessParams
    events: tuple[dict, ...]
    cycles: int
    merge_steps: tuple[int, ...]  # steps since the previous merge, per merge

    @property
    def merge_times(self) -> tuple[float, ...]:
        """Window starts of the replay: merged ts minus coordinator_start ts, in seconds."""
        return trace_from_events(self.events, self.params.sync_window_s).starts

    @property
    def duration(self) -> float:
        """The replay's trace length D (3.4)."""
        return trace_from_events(self.events, self.params.sync_window_s).duration


def _event(t: float, name: str, **fields) -> dict:
    return {"ts_ms": int(round(t * 1000.0)), "event": name, **fields}


class TrainingSidecar:
    """The training-time pressure file as a learner reads it at coordinator time t."""

    def __init__(self, source: str, p: HarnessParams, horizon: float):
        self.source, self.p = source, p
        self.busy: Timetable | None = None
        if source == "bursty":
            self.busy = bursty(p.burst_period_s, p.burst_window_s, p.burst_phase_s, horizon=horizon)

    def read(self, t: float) -> tuple[float, float, float, float]:
        """(network, inference, checkpoint, serving_sync_cost) last published before t."""
        p = self.p
        ts = math.floor((t + p.pressure_offset_s) / p.pressure_update_s) * p.pressure_update_s
        if self.busy is None:
            net, inf, ckpt = pressure_values(ts, p.pressure_period_s)
            return float(net), float(inf), float(ckpt), 0.0
        labels = BUSY_LABELS if self.busy.active(ts) else QUIET_LABELS
        return (*labels, self.busy.overlap(ts, ts + p.sync_window_s) / p.sync_window_s)


def _draws(policy: HarnessPolicy, seed: int, p: HarnessParams) -> tuple[np.ndarray, np.ndarray]:
    """Per (cycle, learner): loss drops and U(0, 1) draws, each from its own stream."""
    shape = (policy.max_cycles, p.learners)
    z = stream(seed, "testbed.harness", policy.name, "loss_drop").standard_normal(shape)
    u = stream(seed, "testbed.harness", policy.name, "random_deferral").random(shape)
    return p.loss_drop_mean + p.loss_drop_sd * z, u


def _horizon(policy: HarnessPolicy, p: HarnessParams) -> float:
    cycle = policy.cycle_steps * p.step_s + p.boundary_s + p.merge_s
    return p.startup_s + p.pressure_offset_s + policy.max_cycles * cycle + p.pressure_update_s + 2 * p.sync_window_s


def run_harness(policy: str | HarnessPolicy, seed: int, params: HarnessParams | None = None) -> HarnessRun:
    """Simulate one harness run (assumptions in the module docstring); deterministic per (policy, seed, params)."""
    p = params or HarnessParams()
    pol = HARNESS_POLICIES[policy]() if isinstance(policy, str) else policy
    loss, uniform = _draws(pol, seed, p)
    sidecar = TrainingSidecar(pol.pressure_source, p, _horizon(pol, p))
    events = [_event(0.0, "coordinator_start", policy=pol.name, seed=seed)]
    t = last_sync = p.startup_s
    since, merges, cycle = 0, [], 0
    while len(merges) < pol.max_rounds and cycle < pol.max_cycles:
        t += pol.cycle_steps * p.step_s
        since += pol.cycle_steps
        net, inf, ckpt, cost = sidecar.read(t)
        view = CycleView(
            cycle=cycle,
            round=len(merges),
            steps_since_sync=since,
            tokens_since_sync=since * p.tokens_per_step,
            staleness_s=t - last_sync,
            network=net,
            inference=inf,
            checkpoint=ckpt,
            serving_sync_cost=cost,
            loss_drop=loss[cycle],
            uniform=uniform[cycle],
        )
        merge = coordinator_merges(pol, view)
        t += p.boundary_s
        events.append(_event(t, "control_cycle", cycle=cycle, steps_since_sync=since, merge=merge))
        if merge:
            t += p.merge_s
            merges.append(since)
            events.append(_event(t, "merged", round=len(merges), cycle=cycle, steps=since))
            since, last_sync = 0, t
        cycle += 1
    events.append(_event(t + p.stop_tail_s, "coordinator_stop", rounds=len(merges), cycles=cycle))
    return HarnessRun(pol.name, seed, p, tuple(events), cycle, tuple(merges))


def write_events(path: str | Path, events) -> Path:
    """The event log as coordinator.jsonl (one JSON record per line), readable by `models.timetables.load_trace`."""
    path = Path(path)
    path.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events), encoding="utf-8")
    return path
