"""`pressure_gated`: the fixed cadence, deferred while the fleet is under pressure.

The usual operational guard: merge every `H` steps as `fixed` does, but when the step comes and
fleet pressure is above `threshold`, wait; retry at every following step and merge as soon as
pressure drops, or at `h_max` at the latest (the corridor is never left).

Pressure is either the largest of p_net, p_srv and p_ckpt (`combine: max`, the conservative
default: any one saturated resource defers), or their weighted mean (`combine: weighted`, weights
normalised by their sum, so the result stays in [0, 1]). The default threshold 0.75 lets a
50 %-loaded serving tier merge on cadence and defers through bursts or saturation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from wadiloco.models.policies.base import Observation, Params, Policy
from wadiloco.models.policies.registry import register


class PressureGatedParams(Params):
    H: int = Field(256, ge=1, description="cadence in inner steps (must lie in the corridor)")
    threshold: float = Field(0.75, ge=0, le=1, description="defer while pressure is above this")
    combine: Literal["max", "weighted"] = Field("max", description="how p_net, p_srv, p_ckpt combine")
    w_net: float = Field(1.0, ge=0, description="weight of p_net when combine=weighted")
    w_srv: float = Field(2.0, ge=0, description="weight of p_srv when combine=weighted")
    w_ckpt: float = Field(1.0, ge=0, description="weight of p_ckpt when combine=weighted")

    @model_validator(mode="after")
    def _weights(self):
        if self.combine == "weighted" and self.w_net + self.w_srv + self.w_ckpt <= 0:
            raise ValueError("combine=weighted needs at least one positive weight")
        return self


@register
class PressureGated(Policy):
    name = "pressure_gated"
    Params = PressureGatedParams
    summary = "fixed cadence H, deferred while fleet pressure is above the threshold; forced at h_max"

    @classmethod
    def check_corridor(cls, params: PressureGatedParams, h_min: int, h_max: int) -> str | None:
        if not h_min <= params.H <= h_max:
            return f"H = {params.H} lies outside the merge corridor [{h_min}, {h_max}] (merge.h_min/h_max)"
        return None

    def pressure(self, obs: Observation) -> float:
        p = self.p
        if p.combine == "max":
            return max(obs.p_net, obs.p_srv, obs.p_ckpt)
        total = p.w_net + p.w_srv + p.w_ckpt
        return (p.w_net * obs.p_net + p.w_srv * obs.p_srv + p.w_ckpt * obs.p_ckpt) / total

    def decide(self, obs: Observation) -> bool:
        gap = obs.steps_since_merge
        if gap >= obs.h_max:
            return True
        if gap < self.p.H:
            return False
        return self.pressure(obs) <= self.p.threshold
