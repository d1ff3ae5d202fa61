"""A test-only workload kind, `test_plugin_flat` (Poisson at `load`, the synthetic kinds' token
lengths), registered only where $WADILOCO_PLUGINS names this file: a spawned worker knows it only
if the command loaded its plugins there (experiments/sweep/backends.py `process_pool`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from wadiloco.models.workload.kinds import WORKLOADS, SyntheticParams, synthetic


class FlatParams(SyntheticParams):
    kind: Literal["test_plugin_flat"] = "test_plugin_flat"
    load: float = Field(0.5, gt=0, le=100)


if "test_plugin_flat" not in WORKLOADS:

    @synthetic("test_plugin_flat", FlatParams)
    def flat(p, ctx):
        """Poisson at a constant rate."""
        import numpy as np

        return np.array([0.0, ctx.horizon_s]), np.array([1.0])
