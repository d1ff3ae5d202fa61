"""`PlannedSteps`: merges at given inner steps and nowhere else. Not registered (no YAML name): it
is what `FutureView.simulate` runs when an oracle asks the simulator about a placement, so the
oracle's own run, which merges at the placement it chose, reproduces that simulation exactly."""

from __future__ import annotations

from bisect import bisect_right

from pydantic import Field

from wadiloco.models.policies.base import NEVER, Observation, Params, Policy


class PlannedParams(Params):
    steps: tuple[int, ...] = Field((), description="inner steps to merge at, increasing")


class PlannedSteps(Policy):
    """Merges exactly at `steps`. A probe may hold a single merge, so the corridor is not checked
    here (the oracle that asks checks its own placements)."""

    name = "planned_steps"
    respects_corridor = False
    Params = PlannedParams

    def decide(self, obs: Observation) -> bool:
        return obs.step in self.p.steps

    def next_merge(self, step: int, last_merge_step: int) -> int:
        steps = self.p.steps
        j = bisect_right(steps, step)
        return steps[j] if j < len(steps) else NEVER
