"""Run one (scenario, policy, seed, draw): the unit every command and sweep is made of.

Matched controls (a policy whose params name a `reference`) first run the reference policy on
the same seed and inherit its merge count, so the control and the reference see the same
arrivals (common random numbers) and the same merge budget.
"""

from __future__ import annotations

from typing import Any

from wadiloco.models.config import Resolved, resolve
from wadiloco.models.scenario import Scenario
from wadiloco.sim.fleet import RunResult, simulate


def run_one(
    sc: Scenario | Resolved,
    seed: int,
    policy: str | None = None,
    params: dict[str, Any] | None = None,
    draw: int = 0,
    check: bool | None = None,
    reference: dict[str, int] | None = None,
    **fleet_kw,
) -> RunResult:
    """`policy` and `params` default to the scenario's (models.config.policy_choice); a
    `Resolved` scenario runs its own policy unless another is named. `reference` ({"merges": n,
    "steps": s}) skips re-running the reference: a sweep runs it once per seed and hands its
    figures to every draw."""
    r = resolve(sc, policy, params)
    if r.policy.takes_reference and reference is None:
        ref = resolve(r, r.params.reference, dict(r.params.reference_params or {}))
        ref_res = simulate(ref, seed, check=check, **fleet_kw)
        reference = {"merges": ref_res.summary["merges"], "steps": ref_res.summary["inner_steps"]}
    res = simulate(
        r,
        seed,
        draw=draw,
        check=check,
        reference_merges=reference["merges"] if reference else None,
        reference_steps=reference["steps"] if reference else None,
        **fleet_kw,
    )
    res.summary["reference_merges"] = reference["merges"] if reference else None
    return res
