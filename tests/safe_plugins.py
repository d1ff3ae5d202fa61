"""A test-only workload kind for `wadiloco safe`, loaded in the parent and in every sweep worker through
$WADILOCO_PLUGINS=<path of this file>.

- `test_periodic`: one request every 1/rate seconds per sidecar (rate = `load` x the sidecar's
  capacity, models.workload.kinds Context.rate_for), from a phase drawn per seed, all of one prompt
  length and one output token: a D/D/1 queue, which keeps up with a GPU at a share `f` of its speed
  exactly while `load` <= f.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from wadiloco.models.rng import stream
from wadiloco.models.spec.schema import Strict
from wadiloco.models.workload.kinds import WORKLOADS, Arrivals, workload

PROMPT = 4000


class PeriodicParams(Strict):
    kind: str = "test_periodic"
    load: float = Field(0.5, gt=0, le=100)


if "test_periodic" not in WORKLOADS:

    @workload("test_periodic", PeriodicParams)
    def _periodic(p, ctx):
        """Requests at a constant spacing from a per-seed phase, one prompt length, one output token."""
        gap = 1.0 / ctx.rate_for(p.load, PROMPT, 1.0)
        out = []
        for s in range(ctx.n_sidecars):
            t = np.arange(stream(ctx.seed, "arrivals", s).uniform(0, gap), ctx.horizon_s, gap)
            out.append(Arrivals(t, np.full(len(t), PROMPT, np.int64), np.ones(len(t), np.int64)))
        return out
