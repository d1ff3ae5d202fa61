"""`overlap_oracle`: an oracle that minimises a proxy, the request arrivals a merge overlaps. Reads
the whole arrival trace; not deployable. Not an upper bound on what placement can buy: it optimises
a count, not the violations (`sim_oracle` measures those by simulation), its `lead_s` was chosen on
bursty.yaml, a regime it is then judged on, and there it loses to matched-random.

Budget. Like `matched_random`, it takes the merge count N of a reference run on the same seed
(`reference`, default wa_diloco) and uses exactly N merges, placed in the same final window
(see `models.policies.matched_random`), so the two differ only in *where* the merges go.

Cost model (the proxy). Merging at inner step k as the (j+1)-th merge of the plan costs the number
of fleet-wide request arrivals in

    [t_j(k) - lead_s, t_j(k) + D],   t_j(k) = t_0 + (k - k_0) * step_time + j * D

where (t_0, k_0) is the time and step the plan starts from, step_time the configured mean inner
step time, and D the expected merge duration. Requests arriving while the merge runs are slowed
by it; requests that arrived up to `lead_s` before it starts are likely still in flight when it
starts and are slowed too. `lead_s` defaults to 20 s because the costly case is the backlog a
burst leaves behind: queued requests stay in the system for tens of seconds after the burst ends
(in a check on bursty.yaml, a 2 s lead let the oracle merge into that backlog and overlap more
requests than wa_diloco; leads of 10-30 s did about equally well). This is a count, not a latency
model: it is what `overlap_requests` measures, and fewer overlapped requests need not mean fewer
violated ones. The minimum-cost placement is found exactly by dynamic programming over step
boundaries (`models.policies.placement.min_cost_placement`).

D is `merge_duration_s` (default 8 s, SPEC's "a merge takes about 8 s") until the first merge has
run; with `learn_duration` (default on) it then becomes the mean measured duration of merges so
far (from the observation, i.e. the oracle's own past). Step times jitter and barriers add a
little, so the wall-clock time of step k drifts from the estimate; after every merge the oracle
re-plans the remaining merges from the actual time and step. The rest of the previous plan is
always feasible for the new problem, so re-planning never loses the budget.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from wadiloco.models.errors import InputError
from wadiloco.models.policies.base import FutureView, Observation, PolicyContext
from wadiloco.models.policies.matched_random import MatchedControl, ReferenceParams, plan_window, reference_budget
from wadiloco.models.policies.placement import PlacementError, min_cost_placement
from wadiloco.models.policies.registry import register


class OverlapOracleParams(ReferenceParams):
    merge_duration_s: float = Field(
        8.0, gt=0, le=3600, description="expected merge duration D before one is measured (s)"
    )
    lead_s: float = Field(
        20.0, ge=0, le=3600, description="arrivals this long before a merge starts count as overlapping (s)"
    )
    learn_duration: bool = Field(True, description="after the first merge, use the measured mean merge duration as D")


def overlap_costs(
    arrivals: np.ndarray, n: int, k0: int, t0: float, last_step: int, step_time: float, duration: float, lead: float
) -> np.ndarray:
    """cost[j, k] = arrivals in [t_j(k) - lead, t_j(k) + duration] for k >= k0 (inf before k0)."""
    cost = np.full((n, last_step + 1), np.inf)
    if last_step < k0:
        return cost
    ks = np.arange(k0, last_step + 1)
    for j in range(n):
        t = t0 + (ks - k0) * step_time + j * duration
        cost[j, k0:] = np.searchsorted(arrivals, t + duration, side="right") - np.searchsorted(
            arrivals, t - lead, side="left"
        )
    return cost


@register
class OverlapOracle(MatchedControl):
    name = "overlap_oracle"
    oracle = True
    Params = OverlapOracleParams
    summary = (
        "oracle on a proxy: the reference's merge count placed (by dynamic programming over steps) where the "
        "fewest future request arrivals overlap a merge (not the violations; not an upper bound)"
    )

    def __init__(self, params: OverlapOracleParams, ctx: PolicyContext):
        super().__init__(params, ctx)
        self.n, self.ref_steps = reference_budget(self.name, ctx)
        self.window = plan_window(
            self.name, params.reference, self.n, self.ref_steps, ctx.h_min, ctx.h_max, params.slack_steps
        )
        self.plan: list[int] = []
        self._arrivals: np.ndarray | None = None
        self._step_time = 0.0
        self._merges_seen = 0

    def prepare(self, future: FutureView) -> None:
        self.future_seen = True
        self._arrivals = np.sort(np.asarray(future.arrival_times, dtype=float))
        self._step_time = float(future.step_time_s)
        self.plan = self._solve(self.n, start=0, k0=0, t0=0.0, duration=self.p.merge_duration_s)

    def _solve(self, n: int, start: int, k0: int, t0: float, duration: float) -> list[int]:
        lo, hi = self.window
        cost = overlap_costs(self._arrivals, n, k0, t0, hi, self._step_time, duration, self.p.lead_s)
        try:
            steps, _ = min_cost_placement(cost, n, self.ctx.h_min, self.ctx.h_max, lo, hi, start)
        except PlacementError as e:
            raise InputError(f"<policy {self.name}>", "policy.params.reference", str(e)) from None
        return steps

    def decide(self, obs: Observation) -> bool:
        if self._arrivals is None:
            raise RuntimeError("overlap_oracle needs prepare(FutureView) before the run")
        if obs.merges > self._merges_seen:
            self._merges_seen = obs.merges
            left = self.n - obs.merges
            dur = (
                obs.merge_duration_s
                if (self.p.learn_duration and obs.merge_duration_s > 0)
                else self.p.merge_duration_s
            )
            done = [s for s in self.plan if s <= obs.last_merge_step]
            if left > 0 and obs.last_merge_step in self.plan:
                # The rest of the old plan is feasible here (costs before the current step are
                # infinite, and the old plan lies after it), so the solve cannot fail.
                try:
                    self.plan = done + self._solve(
                        left, start=obs.last_merge_step, k0=obs.step, t0=obs.now, duration=dur
                    )
                except InputError:  # pragma: no cover - keep the old plan
                    pass
        return obs.step in self.plan
