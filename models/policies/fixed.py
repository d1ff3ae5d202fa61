"""`fixed`: merge every H inner steps, the usual DiLoCo cadence."""
from pydantic import Field

from models.policies import register
from models.policies.base import Observation, Params, Policy


class FixedParams(Params):
    H: int = Field(256, ge=1, description="inner steps between merges")


@register
class Fixed(Policy):
    name = "fixed"
    Params = FixedParams
    summary = "merge every H steps (H clipped into the corridor)"

    def decide(self, obs: Observation) -> bool:
        h = min(max(self.p.H, obs.h_min), obs.h_max)
        return obs.steps_since_merge >= h
