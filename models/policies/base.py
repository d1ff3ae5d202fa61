"""What a merge policy may see and how it is registered.

A policy is asked at every inner-step boundary (the first island to reach step k asks for k)
and answers merge-now or not. It receives only an `Observation`: a frozen snapshot of the
fleet's past and present, built by the coordinator. Online policies never get the simulator,
the workload or the trace; the arrival times they could forecast from arrive binned, up to now.
Only classes with `oracle = True` are handed a `FutureView` (the whole arrival schedule) before
the run, and `Policy.prepare` refuses it otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """Base of every policy's parameter model: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


@dataclass(frozen=True)
class LearnerSignals:
    dloss: float  # modelled loss reduction since the last merge
    tokens: float  # tokens contributed since the last merge
    staleness: int  # inner steps since the last merge


@dataclass(frozen=True)
class Observation:
    now: float
    step: int  # the inner step just completed by the leading island
    last_merge_step: int  # 0 before the first merge
    merges: int
    h_min: int
    h_max: int
    step_time_s: float  # configured mean inner-step time (what a controller knows)
    learners: tuple[LearnerSignals, ...]
    p_net: float  # [0,1] network utilisation over the pressure window
    p_srv: float  # [0,1] serving load relative to capacity over the window
    p_ckpt: float  # [0,1] checkpoint store busy fraction over the window
    queue_len: int  # requests waiting fleet-wide, now
    running: int  # requests in batches fleet-wide, now
    bin_s: float  # width of an arrival-count bin
    arrival_counts: np.ndarray = field(repr=False)  # fleet-wide arrivals per bin, past bins only
    merge_duration_s: float = 0.0  # mean duration of merges so far (0 before the first)

    @property
    def steps_since_merge(self) -> int:
        return self.step - self.last_merge_step


@dataclass(frozen=True)
class FutureView:
    """Only for oracles: the whole fleet arrival schedule (times of every request, sorted), and
    `simulate(steps)`, which runs this very scenario and seed (the same arrivals) with merges at
    the given inner steps and returns what came of it (`WhatIf`): the simulator as a view of the
    future, for an oracle that measures placements instead of guessing (`sim_oracle`)."""

    arrival_times: np.ndarray
    horizon_s: float
    step_time_s: float
    n_sidecars: int
    simulate: Callable[[Sequence[int]], WhatIf] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class WhatIf:
    """What a simulated placement gave: the run's SLO violations, its requests' total (censored)
    end-to-end latency, the merges it made (steps) and how long they held training (mean, s)."""

    slo_violations: int
    e2e_total_s: float
    merge_steps: tuple[int, ...]
    merge_duration_s: float


@dataclass(frozen=True)
class PolicyContext:
    h_min: int
    h_max: int
    seed: int
    draw: int = 0
    reference_merges: int | None = None  # matched controls: the reference run's merge count
    reference_steps: int | None = None  # ... and the inner steps it completed
    rng: Any = None  # np.random.Generator of the policy's own stream
    base_dir: str = "."  # the scenario's folder: relative paths in params resolve from it


NEVER = 1 << 62  # Policy.next_merge: a step no run reaches


class Policy:
    """Capabilities are declared, not guessed: `oracle` (may read the future through `prepare`),
    `control` (a randomised comparator, not an evaluated policy), `takes_reference` (inherits a
    reference run's merge budget; its Params then have `reference` and `reference_params`), and
    `respects_corridor` (checked against h_min/h_max by the invariants). A policy that has read
    the future sets `future_seen`; the fleet's invariants refuse that from an online policy."""

    name: ClassVar[str] = ""
    oracle: ClassVar[bool] = False
    control: ClassVar[bool] = False
    takes_reference: ClassVar[bool] = False
    respects_corridor: ClassVar[bool] = True
    Params: ClassVar[type[Params]] = Params
    summary: ClassVar[str] = ""
    future_seen: bool = False

    def __init__(self, params: Params, ctx: PolicyContext):
        self.p = params
        self.ctx = ctx

    @classmethod
    def check_corridor(cls, params: Params, h_min: int, h_max: int) -> str | None:
        """A problem with these params under this corridor (the field name), or None."""
        return None

    @classmethod
    def schedule_work(
        cls, params: Params, horizon_s: float, step_time_s: float, base_dir: str
    ) -> tuple[float, float | None]:
        """For the run-size estimate (models.spec.runsize): the scheduled instants these params make the
        policy walk through in a run of `horizon_s` seconds, and the merges it makes at most (None: the
        corridor bounds them). A policy with a schedule of its own says; the others walk none."""
        return 0.0, None

    @classmethod
    def check_inputs(cls, params: Params, base_dir: str) -> str | None:
        """A problem with the inputs these params read (a file relative to `base_dir`), or None."""
        return None

    def prepare(self, future: FutureView) -> None:
        """Oracles override this; it is called only for classes with `oracle = True`."""
        raise PermissionError(f"policy {self.name!r} is online and may not read the future")

    def decide(self, obs: Observation) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def next_merge(self, step: int, last_merge_step: int) -> int | None:
        """For a policy whose answers follow from the step count alone (not from what the fleet
        observes): the first step after `step` at which `decide` says merge, the last merge having
        closed `last_merge_step`; NEVER for none. The fleet then asks nobody at the other steps and
        lets the engines run ahead to that one (sim.training: Trainer.next_decision_at). None, the
        default: ask `decide` with an Observation at every step."""
        return None
