"""`online_forecast`: `wa_diloco` plus a forecast of the request rate; deployable (online).

The controller sees only the past: the fleet's arrival counts per completed monitor bin
(`obs.arrival_counts`), the pressures and the progress signals.

Rule, at every inner step:
1. gap >= h_max: merge (the corridor forces it); gap < h_min: wait.
2. the `wa_diloco` mean score must reach `threshold` (same weights, same normalisation; see
   `models.policies.wa_diloco`), so the forecast only ever *adds* caution to that controller;
3. candidate windows: a merge started now, or after j = 1..J more steps (J = min(h_max - gap,
   `lookahead_steps`)), is expected to overlap the forecast arrivals in [t_j, t_j + D]
   (t_j = now + j * step_time; D is `merge_duration_s` until a merge has been measured, then the
   mean measured duration). Merging now requires both
   a. *cheapest among the candidates*: cost(now) <= (1 + tolerance) * min_j cost(j), so a
      forecaster that sees a trough coming (Holt-Winters with a season) waits for it, and
   b. *cheap against recent history*: cost(now) <= the `quantile` of the realised arrivals in
      every D-long window of the last `lookback_s` seconds. A one-step EWMA forecast is flat, so
      (a) always holds for it and cannot rank future windows; (b) is what makes it useful: it
      merges when the current (smoothed) rate is in the low tail of what the fleet has recently
      seen, i.e. in a lull, and otherwise waits (up to h_max).

Forecasters (`models.policies.forecast`): `ewma` (the paper's one-step EWMA, smoothing `alpha` per bin)
or `holt_winters` (statsmodels ExponentialSmoothing with an additive season, `season_s` or
detected from the autocorrelation; refitted every `refit_s`).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from wadiloco.models.policies.base import Observation, Policy, PolicyContext
from wadiloco.models.policies.forecast import make_forecaster, window_costs
from wadiloco.models.policies.registry import register
from wadiloco.models.policies.wa_diloco import ScoreMixin, WaDilocoParams


class OnlineForecastParams(WaDilocoParams):
    forecaster: Literal["ewma", "holt_winters"] = Field("ewma", description="request-rate forecaster")
    alpha: float = Field(0.3, gt=0, le=1, description="EWMA smoothing per monitor bin")
    quantile: float = Field(
        0.3,
        gt=0,
        le=1,
        description="merge only if the forecast window cost is at or below this quantile of recent window costs",
    )
    lookback_s: float = Field(300.0, gt=0, description="history the quantile is taken over (s)")
    lookahead_steps: int = Field(120, ge=0, description="how many steps ahead candidate windows are scored")
    tolerance: float = Field(0.05, ge=0, description="now counts as cheapest if within this fraction of the best")
    merge_duration_s: float = Field(8.0, gt=0, le=3600, description="expected merge duration until one is measured (s)")
    season_s: float | None = Field(None, gt=0, description="holt_winters season (s); null: detect it")
    refit_s: float = Field(60.0, gt=0, description="holt_winters refit interval (s)")


@register
class OnlineForecast(ScoreMixin, Policy):
    name = "online_forecast"
    Params = OnlineForecastParams
    summary = (
        "wa_diloco plus a request-rate forecast (EWMA or Holt-Winters): after h_min, merge when the "
        "score clears the threshold and the forecast merge window is the cheapest ahead and cheap "
        "against recent history; forced at h_max"
    )

    def __init__(self, params: OnlineForecastParams, ctx: PolicyContext):
        super().__init__(params, ctx)
        self.fc = None
        self.last_costs: np.ndarray | None = None  # for inspection: the candidate costs of the last look

    def decide(self, obs: Observation) -> bool:
        p = self.p
        if self.fc is None:
            self.fc = make_forecaster(p.forecaster, obs.bin_s, p.alpha, p.season_s, p.refit_s)
        self.fc.update(obs.arrival_counts)
        self.track_rate(obs)
        gap = obs.steps_since_merge
        if gap >= obs.h_max:
            return True
        if gap < obs.h_min or self.score(obs) < p.threshold:
            return False
        return self.window_is_cheap(obs, gap)

    def window_is_cheap(self, obs: Observation, gap: int) -> bool:
        p = self.p
        dur = obs.merge_duration_s if obs.merge_duration_s > 0 else p.merge_duration_s
        J = max(0, min(obs.h_max - gap, p.lookahead_steps))
        starts = obs.now + obs.step_time_s * np.arange(J + 1)
        origin = len(obs.arrival_counts) * obs.bin_s  # end of the last completed bin (<= now)
        n_bins = int(math.ceil((starts[-1] + dur - origin) / obs.bin_s)) + 1
        costs = window_costs(self.fc.forecast(n_bins), origin, starts, dur, obs.bin_s)
        self.last_costs = costs
        now_cost = float(costs[0])
        if now_cost > (1.0 + p.tolerance) * float(costs.min()) + 1e-9:
            return False  # a cheaper window is forecast within reach
        counts = obs.arrival_counts
        m = max(1, int(round(dur / obs.bin_s)))
        look = counts[-max(m, int(round(p.lookback_s / obs.bin_s))) :]
        if len(look) < m:
            return True  # no history to compare with yet
        past = np.convolve(look, np.ones(m), mode="valid")  # arrivals in every D-long window
        return now_cost <= float(np.quantile(past, p.quantile)) + 1e-9
