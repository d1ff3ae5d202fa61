"""`matched_random`: the control every placement claim must beat. Not deployable.

It inherits the merge count N of a reference policy's run on the same seed (the runner runs the
reference first; `experiments.runner.run_one`) and places exactly N merges uniformly at random
among all corridor-feasible placements, with the policy's own RNG stream (seed, "policy",
"matched_random", draw), so draws are reproducible and independent of every other subsystem.
Same budget, no information: if a "smart" policy does not beat this, its placement is not what
helps.

Sampler (models.policies.placement): exact uniform sampling over placements s_1 < ... < s_N where every
gap, including the first from step 0, is in [h_min, h_max] and the tail to the run's last inner
step obeys the corridor rule of `models.results.invariants.check_corridor` (<= h_max + 1). A counting
dynamic programme gives, for each step, the number of ways to reach it with j merges; the
placement is then drawn backwards with probabilities proportional to those counts, which makes
every feasible placement equally likely.

Run length. The plan is made before the run, but the run's final inner step T is only known
afterwards; it differs from the reference's T_ref by a few steps because merges block the
islands for slightly different times (barrier waits, merge durations). The plan therefore uses
the final window of `models.policies.placement.final_window(T_ref, h_max, slack)`: the last merge is at
most T_ref - slack (the run surely gets there) and at least T_ref + slack - h_max - 1 (the tail
stays legal even if the run goes `slack` steps further). If that window leaves no feasible
placement, the slack is reduced step by step down to 0, where the reference's own placement is
always feasible. If even that fails, the reference's count cannot fit the corridor: an
`InputError` on `policy.params.reference`.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from pydantic import Field, field_validator, model_validator

from wadiloco.models.errors import InputError
from wadiloco.models.policies.base import NEVER, Observation, Params, Policy, PolicyContext
from wadiloco.models.policies.placement import PlacementError, feasible_range, final_window, sample_placement
from wadiloco.models.policies.registry import POLICIES, parse_policy, register
from wadiloco.models.rng import stream


class ReferenceParams(Params):
    """Params of a matched control: which policy's run sets the merge budget."""

    reference: str = Field("wa_diloco", description="policy whose run on the same seed sets the merge count")
    reference_params: dict[str, Any] = Field(default_factory=dict, description="params of the reference policy")
    slack_steps: int = Field(8, ge=0, le=10_000, description="run-length uncertainty the plan absorbs (steps)")

    @field_validator("reference")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in POLICIES:
            raise ValueError(f"unknown reference policy {v!r}; known: {', '.join(sorted(POLICIES))}")
        if POLICIES[v].takes_reference:
            raise ValueError(f"reference {v!r} is itself a matched control; name the policy it should match")
        if not POLICIES[v].respects_corridor:
            raise ValueError(f"reference {v!r} does not respect the corridor, so its merge count cannot be matched")
        return v

    @model_validator(mode="after")
    def _ref_params(self):
        try:
            parse_policy(self.reference, self.reference_params, "<reference>", "reference_params")
        except InputError as e:
            raise ValueError(f"invalid params for reference {self.reference!r}: {e.where}: {e.message}") from None
        return self


class MatchedControl(Policy):
    """Base of the controls that take a reference's merge budget: the reference's own params must
    fit the scenario's corridor too (e.g. `reference: fixed` with H outside it is an input error)."""

    takes_reference = True

    @classmethod
    def check_corridor(cls, params: ReferenceParams, h_min: int, h_max: int) -> str | None:
        ref_cls, ref_p = parse_policy(params.reference, params.reference_params)
        problem = ref_cls.check_corridor(ref_p, h_min, h_max)
        return f"reference {params.reference!r}: {problem}" if problem else None


def reference_budget(policy: str, ctx: PolicyContext) -> tuple[int, int]:
    """(merges, steps) of the reference run, or an InputError if the runner did not provide them."""
    if ctx.reference_merges is None or ctx.reference_steps is None:
        raise InputError(
            f"<policy {policy}>",
            "policy.params.reference",
            "this control needs the reference run's merge and step counts; run it through "
            "experiments.runner.run_one (or `wadiloco run`), which runs the reference first",
        )
    return int(ctx.reference_merges), int(ctx.reference_steps)


def plan_window(
    policy: str, ref_name: str, n: int, steps: int, h_min: int, h_max: int, slack: int, start: int = 0
) -> tuple[int, int]:
    """The widest-slack final window (slack <= `slack`) that admits n merges, else InputError."""
    for sl in range(slack, -1, -1):
        lo, hi = final_window(steps, h_max, sl)
        if hi >= start and feasible_range(n, h_min, h_max, lo, hi, start):
            return lo, hi
    raise InputError(
        f"<policy {policy}>",
        "policy.params.reference",
        f"the reference {ref_name!r} made {n} merge(s) in {steps} inner steps, and {n} merge(s) "
        f"cannot be placed in {steps} steps within the corridor [{h_min}, {h_max}] (every gap, "
        f"the first from step 0, in the corridor; at most {h_max} + 1 steps after the last "
        f"merge); choose a reference that respects the corridor or a longer horizon",
    )


@register
class MatchedRandom(MatchedControl):
    name = "matched_random"
    control = True
    Params = ReferenceParams
    summary = (
        "control: the reference run's merge count, placed uniformly at random among corridor-feasible "
        "placements (not deployable)"
    )

    def __init__(self, params: ReferenceParams, ctx: PolicyContext):
        super().__init__(params, ctx)
        n, steps = reference_budget(self.name, ctx)
        lo, hi = plan_window(self.name, params.reference, n, steps, ctx.h_min, ctx.h_max, params.slack_steps)
        try:
            rng = ctx.rng if ctx.rng is not None else stream(ctx.seed, "policy", self.name, ctx.draw)
            self.plan = sample_placement(n, ctx.h_min, ctx.h_max, lo, hi, rng)
        except PlacementError as e:  # pragma: no cover - plan_window checked feasibility
            raise InputError(f"<policy {self.name}>", "policy.params.reference", str(e)) from None
        self._steps = frozenset(self.plan)
        self._sorted = sorted(self._steps)

    def decide(self, obs: Observation) -> bool:
        return obs.step in self._steps

    def next_merge(self, step: int, last_merge_step: int) -> int:
        j = bisect_right(self._sorted, step)
        return self._sorted[j] if j < len(self._sorted) else NEVER
