"""Merge policies: a new policy is one module here, registered with `@register` (policies.registry)
and imported below, plus its YAML name.

The built-in modules are imported here, statically, so that importing the package registers them;
a plug-in registers its own (`replay`, the testbed's: models/testbed/plugin.py) and `POLICIES`
loads the packaged plug-ins before it is first read (models.plugins).
"""

from __future__ import annotations

from wadiloco.models.policies import (  # noqa: F401  (imported to register)
    fixed,
    matched_random,
    no_sync,
    online_forecast,
    overlap_oracle,
    pressure_gated,
    sim_oracle,
    wa_diloco,
)
from wadiloco.models.policies.base import FutureView, LearnerSignals, Observation, Params, Policy, PolicyContext
from wadiloco.models.policies.registry import POLICIES, describe_policies, make_policy, parse_policy, register

__all__ = [
    "POLICIES",
    "register",
    "parse_policy",
    "make_policy",
    "describe_policies",
    "Observation",
    "Policy",
    "PolicyContext",
    "FutureView",
    "LearnerSignals",
    "Params",
]
