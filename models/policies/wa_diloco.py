"""`wa_diloco`: the workload-aware controller of the paper, a linear per-learner score.

    s_i = w_loss*dloss_i + w_tok*tokens_i + w_stale*staleness_i - w_net*p_net - w_srv*p_srv - w_ckpt*p_ckpt

It merges when the gap since the last merge is at least `h_min` and the mean of s_i over learners
is at least `threshold`, or when the gap reaches `h_max` (the corridor comes from the scenario via
the observation; a controller cannot leave it).

Normalisation (every term is in [0, 1], so the weights are comparable):
* staleness_i / h_max: 1 when the learner has gone a whole corridor without merging.
* tokens_i / (h_max * tokens per step), with tokens per step read off the signal itself
  (tokens_i / staleness_i): the share of a corridor's worth of tokens not yet merged. In this
  simulator every island contributes the same tokens per step, so this equals the staleness term;
  it stays separate because a fleet with heterogeneous islands would make them differ.
* dloss_i / (r0 * h_max), where r0 is the per-step loss reduction seen at the first observation
  of the run (the steepest point of a decreasing-returns loss curve): the share of a corridor's
  worth of progress at the initial rate. It is below the staleness term and falls as training
  progresses, which is what "loss reduction relative to what merging used to buy" means.
* Pressures p_net, p_srv, p_ckpt are already in [0, 1] (see `sim.monitor.Monitor.observe`).

With the default weights the progress part sums to at most 1 and the serving weight is the
largest pressure weight: at threshold 0 the controller merges once the progress share exceeds
the serving load, e.g. near 256 steps at 50 % serving load, at `h_min` in quiet periods of a
bursty load, and only at `h_max` when serving is saturated.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from wadiloco.models.policies.base import Observation, Params, Policy
from wadiloco.models.policies.registry import register


class WaDilocoParams(Params):
    w_loss: float = Field(0.4, ge=0, description="weight of the normalised loss reduction")
    w_tok: float = Field(0.2, ge=0, description="weight of the normalised unmerged tokens")
    w_stale: float = Field(0.4, ge=0, description="weight of the normalised staleness")
    w_net: float = Field(0.5, ge=0, description="weight of network pressure p_net")
    w_srv: float = Field(1.0, ge=0, description="weight of serving pressure p_srv (largest by default)")
    w_ckpt: float = Field(0.25, ge=0, description="weight of checkpoint-store pressure p_ckpt")
    threshold: float = Field(0.0, description="merge when the mean score reaches this (after h_min)")

    @model_validator(mode="after")
    def _some_progress(self):
        if self.w_loss + self.w_tok + self.w_stale <= 0:
            raise ValueError(
                "at least one of w_loss, w_tok, w_stale must be positive, or the score "
                "never rises and only h_max would ever merge"
            )
        return self


class ScoreMixin:
    """The score, shared with `online_forecast`."""

    p: WaDilocoParams
    _rate0: float | None = None

    def progress_terms(self, obs: Observation) -> tuple[float, float, float]:
        """Mean over learners of the normalised (dloss, tokens, staleness) terms, each in [0, 1]."""
        h = float(obs.h_max)
        if not obs.learners:
            return 0.0, 0.0, 0.0
        self.track_rate(obs)
        dl = tk = st = 0.0
        for ls in obs.learners:
            st += min(1.0, ls.staleness / h)
            if ls.staleness > 0 and ls.tokens > 0:
                tokens_per_step = ls.tokens / ls.staleness
                tk += min(1.0, ls.tokens / (h * tokens_per_step))
            if self._rate0:
                dl += min(1.0, max(0.0, ls.dloss) / (self._rate0 * h))
        n = len(obs.learners)
        return dl / n, tk / n, st / n

    def track_rate(self, obs: Observation) -> None:
        """Remember r0, the per-step loss reduction at the first observation that shows one."""
        if self._rate0 is None:
            rates = [ls.dloss / ls.staleness for ls in obs.learners if ls.staleness > 0 and ls.dloss > 0]
            if rates:
                self._rate0 = max(rates)

    def score(self, obs: Observation) -> float:
        """Mean over learners of s_i (the pressure terms are fleet-wide, the same for every i)."""
        p = self.p
        dl, tk, st = self.progress_terms(obs)
        return (
            p.w_loss * dl
            + p.w_tok * tk
            + p.w_stale * st
            - p.w_net * obs.p_net
            - p.w_srv * obs.p_srv
            - p.w_ckpt * obs.p_ckpt
        )


@register
class WaDiloco(ScoreMixin, Policy):
    name = "wa_diloco"
    Params = WaDilocoParams
    summary = (
        "workload-aware: merge after h_min once the mean learner score (progress minus weighted "
        "network/serving/checkpoint pressure) reaches the threshold; forced at h_max"
    )

    def decide(self, obs: Observation) -> bool:
        self.track_rate(obs)
        gap = obs.steps_since_merge
        if gap >= obs.h_max:
            return True
        if gap < obs.h_min:
            return False
        return self.score(obs) >= self.p.threshold
