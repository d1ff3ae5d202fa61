"""Run one (scenario, policy, seed, draw): the unit every command and sweep is made of.

Matched controls (a policy whose params name a `reference`) first run the reference policy on
the same seed and inherit its merge count, so the control and the reference see the same
arrivals (common random numbers) and the same merge budget.

Shared busy periods: every run of a scenario and seed serves the
same requests, and between merges an engine mostly does what it does with no merges at all. So a
sweep's worker process (`share=True`: experiments/sweep/worker.py) keeps the no_sync run's tapes of
the last few (scenario, seed) pairs it ran (recording them while it runs no_sync, or running no_sync
first), and every other run of that pair copies what it provably shares with it instead of
simulating it. Results are identical either way (tests/engine/test_tape.py); $WADILOCO_SHARE=0 turns it
off for sweeps. A single run (`share=False`, the default) would only pay for the extra no_sync run.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

from wadiloco.models.engine.tape import Tape
from wadiloco.models.results.run import RunResult
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.spec.run import RunSpec
from wadiloco.sim.fleet import Fleet, simulate

SHARE_ENV = "WADILOCO_SHARE"
TAPES_KEPT = 6  # (scenario, seed) pairs whose tapes a process keeps (a bursty.yaml pair: ~4 MB)
_tapes: OrderedDict[tuple[str, int], list[Tape] | None] = OrderedDict()


def sharing_on() -> bool:
    return os.environ.get(SHARE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def run_one(
    sc,
    seed: int,
    policy: str | None = None,
    params: dict[str, Any] | None = None,
    draw: int = 0,
    check: bool | None = None,
    reference: dict[str, int] | None = None,
    share: bool = False,
    **fleet_kw,
) -> RunResult:
    """Run `sc`, a validated scenario or a RunSpec; `policy` and `params` default to the scenario's
    (models.spec.load.policy_choice); a RunSpec runs its own policy unless another is named.
    `reference` ({"merges": n, "steps": s}) skips re-running the reference: a sweep runs it once per seed and hands its
    figures to every draw. `share` copies what it can from this process's no_sync run of the seed
    (module docstring); `fleet_kw` (tests' arrivals, latency, lookahead) turns it off."""
    r = resolve(sc, policy, params)
    share = share and not fleet_kw
    if r.policy.cls.takes_reference and reference is None:
        ref = resolve(r, r.params.reference, dict(r.params.reference_params or {}))
        ref_res = run_shared(ref, seed, share, check=check, **fleet_kw)
        reference = {"merges": ref_res.summary["merges"], "steps": ref_res.summary["inner_steps"]}
    res = run_shared(
        r,
        seed,
        share,
        draw=draw,
        check=check,
        reference_merges=reference["merges"] if reference else None,
        reference_steps=reference["steps"] if reference else None,
        **fleet_kw,
    )
    res.summary["reference_merges"] = reference["merges"] if reference else None
    return res


def run_shared(r: RunSpec, seed: int, share: bool, **kw) -> RunResult:
    """simulate(r, seed, **kw), with the seed's no_sync tapes when `share` and the fleet allows."""
    if not share:
        return simulate(r, seed, **kw)
    fleet = Fleet(r, seed, **kw)
    if not fleet.shareable():
        return fleet.run()
    key = (r.digest, int(seed))
    if key not in _tapes and r.policy_name == "no_sync":
        fleet.share(None)
        res = fleet.run()
        _keep(key, fleet.tapes())
        return res
    if key not in _tapes:
        base = Fleet(resolve(r, "no_sync"), seed, check=kw.get("check"))
        base.share(None)
        base.run()
        _keep(key, base.tapes())
    tapes = _tapes[key]
    _tapes.move_to_end(key)
    if tapes is not None:
        fleet.share(tapes)
    return fleet.run()


def _keep(key: tuple[str, int], tapes: list[Tape]) -> None:
    _tapes[key] = tapes
    while len(_tapes) > TAPES_KEPT:
        _tapes.popitem(last=False)
