"""Test-only policies for the sweep tests, loaded in the parent *and* in every spawned or Dask
worker through $WADILOCO_PLUGINS=<path of this file> (workers do not import tests/ otherwise).

- `test_probe`: `fixed`, except that runs on the seeds in $WADILOCO_TEST_FAIL_SEEDS (e.g. "1,2")
  raise, so a test can see failed runs recorded and retried.
- `test_matched`: a minimal matched control (takes `reference`), placing the reference's merge
  count evenly with a random offset per draw; exercises the generic reference mechanism.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field

from wadiloco.models.policies import register
from wadiloco.models.policies.base import Observation, Params, Policy, PolicyContext
from wadiloco.models.rng import stream


class ProbeParams(Params):
    H: int = Field(32, ge=1)


@register
class TestProbe(Policy):
    name = "test_probe"
    Params = ProbeParams
    summary = "test only: fixed cadence; fails on the seeds in $WADILOCO_TEST_FAIL_SEEDS"

    def __init__(self, params: ProbeParams, ctx: PolicyContext):
        super().__init__(params, ctx)
        fail = {int(s) for s in os.environ.get("WADILOCO_TEST_FAIL_SEEDS", "").split(",") if s.strip()}
        if ctx.seed in fail:
            raise RuntimeError(f"test_probe: injected failure on seed {ctx.seed}")

    def decide(self, obs: Observation) -> bool:
        h = min(max(self.p.H, obs.h_min), obs.h_max)
        return obs.steps_since_merge >= h


class MatchedParams(Params):
    reference: str = "test_probe"
    reference_params: dict[str, Any] = {}


@register
class TestMatched(Policy):
    name = "test_matched"
    Params = MatchedParams
    control = True
    takes_reference = True
    respects_corridor = False
    summary = "test only: the reference's merge count, evenly spaced with a random offset"

    def __init__(self, params: MatchedParams, ctx: PolicyContext):
        super().__init__(params, ctx)
        if ctx.reference_merges is None:
            raise RuntimeError("test_matched needs the reference's merge count")
        n = int(ctx.reference_merges)
        rng = stream(ctx.seed, "policy", self.name, ctx.draw)
        gap = max(ctx.h_min, min(ctx.h_max, int(ctx.reference_steps) // (n + 1) if n else ctx.h_max))
        first = ctx.h_min + int(rng.integers(0, max(1, gap - ctx.h_min + 1)))
        self.steps = {first + i * gap for i in range(n)}

    def decide(self, obs: Observation) -> bool:
        return obs.step in self.steps
