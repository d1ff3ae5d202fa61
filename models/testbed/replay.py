"""`replay`: merge at given times, as the paper's testbed replayed sync schedules (docs/sources.md,
testbed 3.4-3.6). The testbed plug-in registers it (models/testbed/plugin.py).

The schedule is fixed input: the policy reads the clock and nothing of the workload, so it is online
in the oracle-boundary sense. It merges at the first step boundary at or after each scheduled start
(to within 1 us: a step clock summed from 0.05-s steps drifts by ~1e-10 s over 600 s). Starts that
pass while a merge runs, or between two step boundaries, are all served by the one merge they wait
for. A testbed scenario's trainer steps every 0.05 s with no jitter, the stress loop's poll, so a
replayed merge lands within 50 ms of its start.

One source (none: an empty schedule, which never merges):
- `starts: [...]` (seconds), or `file:` (one number per line, or a coordinator JSONL log; relative to
  the scenario);
- `schedule: stage12_calibrated_replay` (the same for every seed) or `stage12_random_matched` (from
  the run's seed and draw), exactly as models.testbed.stage12 reproduces them;
- `schedule: harness` with `harness_policy:` a name of models.testbed.harness_policies: the merge
  times of that policy's simulated harness run on the run's seed. For a seed of 3.5's table the
  harness step time is fitted so the run has the artifact's trace length D (harness_fit); other
  seeds run with the default step time. `harness_pressure_offset_s` moves that run's pressure clock
  (unrecorded in the artifact: a sensitivity parameter).
Every schedule replays as --sync-events-repeat did: with `repeat` and D > window_s, schedule time
wraps mod D (D: `repeat_s`, else the file's last record, the harness run's D, 600 s for Stage 12,
last start + window_s for a list). `offset_s` shifts the whole schedule (simulated time 0 is the
testbed's `start`); starts that land before 0 are dropped.

The gaps are whatever the schedule says, so the merge corridor is not respected
(`respects_corridor = False`: the invariants do not check it, and matched controls cannot follow it).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from wadiloco.models.policies.base import Observation, Params, Policy, PolicyContext
from wadiloco.models.spec.files import beside, input_problem
from wadiloco.models.testbed import harness, harness_fit, stage12
from wadiloco.models.testbed.harness_policies import HARNESS_POLICIES
from wadiloco.models.timetables import WINDOW_S, load_trace, trace_duration

INF = float("inf")
CLOCK_EPS_S = 1e-6  # a boundary this close before a start counts as at it (float drift of the step clock)


class ReplayParams(Params):
    starts: list[Annotated[float, Field(ge=0, le=1e7)]] | None = None
    file: str | None = None
    schedule: Literal["stage12_calibrated_replay", "stage12_random_matched", "harness"] | None = None
    harness_policy: str | None = Field(None, description="schedule: harness: a harness policy's name")
    harness_pressure_offset_s: float = Field(
        0.0, ge=0, le=1e6, description="schedule: harness: the training run's pressure clock offset (sensitivity)"
    )
    offset_s: float = Field(0.0, ge=-1e7, le=1e7, description="added to every scheduled start")
    repeat: bool = Field(True, description="wrap schedule time mod D, as --sync-events-repeat")
    repeat_s: float | None = Field(None, gt=0, le=1e7, description="the trace length D (default: the schedule's)")
    window_s: float = Field(WINDOW_S, ge=0, le=1e4, description="sync window: D of a list, the wrap rule")

    @field_validator("harness_policy")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        if v is not None and v not in HARNESS_POLICIES:
            raise ValueError(f"unknown harness policy {v!r}; known: {', '.join(sorted(HARNESS_POLICIES))}")
        return v

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in ("starts", "file", "schedule") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of starts, file and schedule (got {', '.join(given)})")
        if (self.schedule == "harness") != (self.harness_policy is not None):
            raise ValueError("harness_policy goes with schedule: harness, and schedule: harness needs it")
        return self


def _path(p: ReplayParams, base_dir: str) -> Path:
    return beside(p.file, base_dir)


@lru_cache(maxsize=64)
def _harness(policy: str, seed: int, offset: float = 0.0) -> tuple[tuple[float, ...], float]:
    """(merge times, D) of a policy's simulated harness run on `seed`, fitted to 3.5's D if it has one;
    `offset`: the run's pressure clock offset (models.testbed.harness assumption 3)."""
    hp = harness.HarnessParams(pressure_offset_s=offset)
    if seed in harness.SEEDS and policy in harness.TRACE_LENGTHS:
        target = harness.TRACE_LENGTHS[policy][harness.SEEDS.index(seed)]
        run = harness_fit.fit_step_time(policy, seed, target, hp).run
    else:
        run = harness.run_harness(policy, seed, hp)
    return run.merge_times, run.duration


def schedule(p: ReplayParams, seed: int, draw: int, base_dir: str = ".") -> tuple[tuple[float, ...], float]:
    """(sorted starts in schedule time, the trace length D) of these params for a run."""
    if p.file is not None:
        trace = load_trace(_path(p, base_dir), p.window_s)
        starts, d = trace.starts, trace.duration
    elif p.schedule == "stage12_calibrated_replay":
        starts, d = tuple(stage12.calibrated_replay()), stage12.DURATION_S
    elif p.schedule == "stage12_random_matched":
        starts, d = tuple(stage12.random_matched(seed, draw)), stage12.DURATION_S
    elif p.schedule == "harness":
        starts, d = _harness(p.harness_policy, seed, p.harness_pressure_offset_s)
    else:
        starts = tuple(p.starts or ())
        d = trace_duration(starts, p.window_s)
    return tuple(sorted(starts)), (p.repeat_s if p.repeat_s is not None else d)


def merge_times(p: ReplayParams, starts: tuple[float, ...], d: float) -> Iterator[float]:
    """Scheduled merge instants in simulated time, in order; endless when the schedule wraps."""
    wrap = p.repeat and d > p.window_s
    if wrap:
        starts = tuple(s for s in starts if s < d)  # t mod D never reaches them
    r = 0
    while True:
        for s in starts:
            t = p.offset_s + r * d + s
            if t >= 0:
                yield t
        if not wrap or not starts:
            return
        r += 1


class Replay(Policy):
    name = "replay"
    respects_corridor = False
    Params = ReplayParams
    summary = (
        "merge at the first step at or after each start of a fixed schedule (a list, a file, Stage 12, a harness run)"
    )

    def __init__(self, params: ReplayParams, ctx: PolicyContext):
        super().__init__(params, ctx)
        self.starts, self.duration = schedule(params, ctx.seed, ctx.draw, ctx.base_dir)
        self._times = merge_times(params, self.starts, self.duration)
        self._next = next(self._times, INF)

    @classmethod
    def schedule_work(cls, params: ReplayParams, horizon_s: float, step_time_s: float, base_dir: str):
        """Every scheduled instant up to the horizon is walked through, those an offset moves before 0
        too (counted, not listed: a wrap of 1 us over 10 minutes is 6e8 of them); merges happen at the
        ones in [0, horizon_s). A harness schedule (a simulated run of its own) is not counted: the
        corridor-free bound, one merge per step, stands for it."""
        if params.schedule == "harness":
            return 0.0, None
        starts, d = schedule(params, 0, 0, base_dir)
        wrap = params.repeat and d > params.window_s
        k = sum(1 for s in starts if s < d) if wrap else len(starts)
        if not k:
            return 0.0, 0.0
        horizon = horizon_s
        if not wrap:
            return float(k), float(sum(1 for s in starts if 0 <= params.offset_s + s < horizon))
        walked = merges = 0.0
        for s in (s for s in starts if s < d):  # instants offset + r d + s, r = 0, 1, ... while < horizon
            last = math.floor((horizon - params.offset_s - s) / d)
            first = max(0, math.ceil(-(params.offset_s + s) / d))
            walked += max(0, last + 1)
            merges += max(0, last - first + 1)
        return walked, merges

    @classmethod
    def check_inputs(cls, params: ReplayParams, base_dir: str) -> str | None:
        if params.file is not None:
            path = _path(params, base_dir)
            problem = input_problem(path, "schedule file")
            if problem:
                return f"file: {path} {problem}"
            load_trace(path, params.window_s)  # its own InputError names the file and line
        return None

    def planned(self, until: float) -> list[float]:
        """The scheduled merge instants before `until` (a fresh pass; the run's own is unaffected)."""
        out = []
        for t in merge_times(self.p, self.starts, self.duration):
            if t >= until:
                break
            out.append(t)
        return out

    def decide(self, obs: Observation) -> bool:
        now = obs.now + CLOCK_EPS_S
        if self._next > now:
            return False
        while self._next <= now:
            self._next = next(self._times, INF)
        return True
