"""`fixed`: merge every H inner steps, the usual DiLoCo cadence."""

from pydantic import Field

from wadiloco.models.policies.base import Observation, Params, Policy
from wadiloco.models.policies.registry import register


class FixedParams(Params):
    H: int = Field(256, ge=1, description="inner steps between merges")


@register
class Fixed(Policy):
    name = "fixed"
    Params = FixedParams
    summary = "merge every H steps"

    @classmethod
    def check_corridor(cls, params, h_min, h_max):
        if not h_min <= params.H <= h_max:
            return f"H = {params.H} lies outside the merge corridor [{h_min}, {h_max}] (merge.h_min/h_max)"
        return None

    def decide(self, obs: Observation) -> bool:
        return obs.steps_since_merge >= self.p.H

    def next_merge(self, step: int, last_merge_step: int) -> int:
        return max(step + 1, last_merge_step + self.p.H)
