"""Run one (scenario, policy, seed, draw): the unit every command and sweep is made of.

Matched controls (a policy whose params name a `reference`) first run the reference policy on
the same seed and inherit its merge count, so the control and the reference see the same
arrivals (common random numbers) and the same merge budget.
"""

from __future__ import annotations

from typing import Any

from wadiloco.models.config import Scenario
from wadiloco.models.policies import parse_policy
from wadiloco.sim.fleet import RunResult, simulate


def reference_of(policy: str, params: dict[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
    cls, p = parse_policy(policy, params)
    if not cls.takes_reference:
        return None
    return p.reference, dict(p.reference_params or {})


def run_one(
    sc: Scenario,
    seed: int,
    policy: str | None = None,
    params: dict[str, Any] | None = None,
    draw: int = 0,
    check: bool | None = None,
    reference: dict[str, int] | None = None,
    **fleet_kw,
) -> RunResult:
    """`reference` ({"merges": n, "steps": s}) skips re-running the reference: a sweep runs it once
    per seed and hands its figures to every draw."""
    policy = policy or sc.policy.name
    if params is None and policy == sc.policy.name:
        params = sc.policy.params
    ref = reference_of(policy, params)
    if ref is not None and reference is None:
        ref_res = run_one(sc, seed, ref[0], ref[1], 0, check, **fleet_kw)
        reference = {"merges": ref_res.summary["merges"], "steps": ref_res.summary["inner_steps"]}
    res = simulate(
        sc,
        seed,
        policy,
        params or {},
        draw=draw,
        check=check,
        reference_merges=reference["merges"] if reference else None,
        reference_steps=reference["steps"] if reference else None,
        **fleet_kw,
    )
    res.summary["reference_merges"] = reference["merges"] if reference else None
    return res
