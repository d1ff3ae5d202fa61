"""`sim_oracle`: the reference's merge budget placed where the simulator, run on the same seed, says
SLO violations are fewest. Reads the future (by simulating it); not deployable. It measures what
placement can buy at most, within the limits of its search, instead of assuming a proxy does.

Budget. Like `matched_random`, exactly the reference run's merge count N on the same seed, with the
last merge in the same final window (`models.policies.matched_random.plan_window`).

Search. Every candidate is a full simulation of this very run (`FutureView.simulate`: same arrivals,
same step times), scored by its SLO violations, ties broken by the requests' total latency:
1. the run without merges, and probes with a single merge every `grid_steps` inner steps; a probe's
   marginal cost is its score minus the no-merge run's (latency as a fraction of the total, so it
   only orders equal violation counts). A later merge starts later by the merges before it (each
   holds training for the probes' measured mean D), so the (j+1)-th merge at step k costs what the
   probes say of step k + j * D / step_time (linear between probes);
2. the placement minimising the summed marginal costs (dynamic programming,
   `models.policies.placement.min_cost_placement`) and the overlap proxy's (`overlap_oracle`'s plan), each
   simulated in full; the better one is kept;
3. coordinate search: each merge in turn moved by +-grid/2 and +-grid/4 steps (corridor and final
   window kept), each move simulated in full and kept when it scores better; `refine_passes`
   rounds, never more than `max_runs` simulations in all (the probe grid widens to fit).
The run then merges at the best placement simulated, so its own result is that simulation's.

Limits: a local search. The marginal costs assume merges act independently (they interact when one
merge's backlog reaches the next), and a single probe's cost is noisy: a merge reshuffles batches,
so it can even remove a few violations, and the search exploits such luck on this seed. Placements
between probe points are reached only by the refinement's moves, and a better placement that
differs from the kept one in several merges at once can be missed. It is never worse, on its own
seed, than the best placement it simulated (the overlap proxy's included); it optimises this seed's
realised arrivals and step times, which no deployable policy knows.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np
from pydantic import Field

from wadiloco.models.errors import InputError
from wadiloco.models.policies.base import NEVER, FutureView, Observation, PolicyContext, WhatIf
from wadiloco.models.policies.matched_random import MatchedControl, ReferenceParams, plan_window, reference_budget
from wadiloco.models.policies.overlap_oracle import overlap_costs
from wadiloco.models.policies.placement import min_cost_placement
from wadiloco.models.policies.registry import register

PROXY_LEAD_S, PROXY_DURATION_S = 20.0, 8.0  # overlap_oracle's defaults, for its plan as a candidate


class SimOracleParams(ReferenceParams):
    grid_steps: int | None = Field(
        None, ge=1, le=100_000, description="inner steps between single-merge probes (default h_min // 4)"
    )
    refine_passes: int = Field(1, ge=0, le=20, description="rounds of moving each merge and keeping what helps")
    max_runs: int = Field(64, ge=4, le=100_000, description="simulations the search may spend in all")


@register
class SimOracle(MatchedControl):
    name = "sim_oracle"
    oracle = True
    Params = SimOracleParams
    summary = (
        "oracle by simulation: the reference's merge count placed where simulated runs of the same seed "
        "have the fewest SLO violations (probes, dynamic programming, local search; not deployable)"
    )

    def __init__(self, params: SimOracleParams, ctx: PolicyContext):
        super().__init__(params, ctx)
        self.n, ref_steps = reference_budget(self.name, ctx)
        self.window = plan_window(
            self.name, params.reference, self.n, ref_steps, ctx.h_min, ctx.h_max, params.slack_steps
        )
        self.plan: list[int] = []
        self.search: dict = {}

    def prepare(self, future: FutureView) -> None:
        self.future_seen = True
        if future.simulate is None:
            raise InputError(f"<policy {self.name}>", "policy", "needs the simulator (FutureView.simulate)")
        s = _Search(self, future)
        self.plan = s.run()
        self.search = s.record()

    def decide(self, obs: Observation) -> bool:
        return obs.step in self.plan

    def next_merge(self, step: int, last_merge_step: int) -> int:
        j = bisect_right(self.plan, step)
        return self.plan[j] if j < len(self.plan) else NEVER


class _Search:
    """One oracle's search (module docstring): candidates simulated, the best kept."""

    def __init__(self, pol: SimOracle, future: FutureView):
        self.p, self.n, (self.lo, self.hi) = pol.p, pol.n, pol.window
        self.h_min, self.h_max = pol.ctx.h_min, pol.ctx.h_max
        self.future, self.step_s = future, float(future.step_time_s)
        self.runs, self.best, self.best_key = 0, None, None
        self.found: dict[str, float] = {}

    def simulate(self, steps: list[int]) -> WhatIf:
        self.runs += 1
        return self.future.simulate(steps)

    def score(self, steps: list[int], tag: str = "") -> tuple[float, float]:
        """A full placement's (violations, latency); infinite if the run did not make those merges."""
        w = self.simulate(steps)
        key = (w.slo_violations, w.e2e_total_s) if list(w.merge_steps) == steps else (math.inf, math.inf)
        if tag:
            self.found[tag] = key[0]
        if self.best_key is None or key < self.best_key:
            self.best, self.best_key = list(steps), key
        return key

    def run(self) -> list[int]:
        if self.n == 0:
            return []
        cost = self.marginal_costs()
        for tag, cand in (("dp", self.dp_plan(cost)), ("proxy", self.proxy_plan())):
            if cand is not None:
                self.score(cand, tag)
        self.refine()
        if self.best_key is None or not math.isfinite(self.best_key[0]):
            raise InputError("<policy sim_oracle>", "policy.params", "no simulated placement made its merges")
        return self.best

    def grid(self) -> int:
        """Probe spacing: `grid_steps` (default h_min // 4), widened so the probes take at most half the runs."""
        g = self.p.grid_steps or max(1, self.h_min // 4)
        span = self.hi - self.h_min + 1
        return max(g, math.ceil(span / max(1, self.p.max_runs // 2 - 1)))

    def marginal_costs(self) -> np.ndarray:
        """cost[j, k]: the (j+1)-th merge at step k, from single-merge probes (module docstring)."""
        base = self.simulate([])
        g = self.grid()
        ks = list(range(self.h_min, self.hi + 1, g))
        probes = [self.simulate([k]) for k in ks]
        ok = [(k, w) for k, w in zip(ks, probes) if list(w.merge_steps) == [k]]
        if not ok:
            raise InputError("<policy sim_oracle>", "policy.params", "no single-merge probe made its merge")
        scale = max(base.e2e_total_s, 1e-9)
        xs = np.array([k for k, _ in ok], dtype=float)
        m = np.array(
            [w.slo_violations - base.slo_violations + (w.e2e_total_s - base.e2e_total_s) / scale for _, w in ok]
        )
        d = float(np.mean([w.merge_duration_s for _, w in ok]))
        self.found.update(no_merges=base.slo_violations, probes=len(ok), merge_hold_s=d, grid_steps=g)
        k = np.arange(self.hi + 1, dtype=float)
        return np.stack([np.interp(k + j * d / self.step_s, xs, m) for j in range(self.n)])

    def dp_plan(self, cost: np.ndarray) -> list[int] | None:
        steps, _ = min_cost_placement(cost, self.n, self.h_min, self.h_max, self.lo, self.hi)
        return steps

    def proxy_plan(self) -> list[int] | None:
        arr = np.asarray(self.future.arrival_times, dtype=float)
        cost = overlap_costs(arr, self.n, 0, 0.0, self.hi, self.step_s, PROXY_DURATION_S, PROXY_LEAD_S)
        steps, _ = min_cost_placement(cost, self.n, self.h_min, self.h_max, self.lo, self.hi)
        return steps

    def refine(self) -> None:
        """Move each merge by +-grid/2 and +-grid/4 steps, keeping a move that scores better."""
        g = self.grid()
        moves = sorted({d for d in (g // 2, -(g // 2), g // 4, -(g // 4)) if d}, key=lambda d: (-abs(d), d))
        for _ in range(self.p.refine_passes):
            improved = False
            for j in range(self.n):
                for d in moves:
                    if self.runs >= self.p.max_runs:
                        return
                    cand = list(self.best)
                    cand[j] += d
                    if self.feasible(cand):
                        before = self.best_key
                        improved |= self.score(cand) < before
            if not improved:
                return

    def feasible(self, steps: list[int]) -> bool:
        gaps = np.diff([0, *steps])
        return bool(np.all(gaps >= self.h_min) and np.all(gaps <= self.h_max) and self.lo <= steps[-1] <= self.hi)

    def record(self) -> dict:
        """What the search did: simulations run, violations of the no-merge run and of the candidates."""
        best = self.best_key[0] if self.best_key else math.nan
        return {"runs": self.runs, "best": best, **self.found}
