"""The oracle boundary (docs/model.md): only `oracle = True` policies may see the future.

Metamorphic test: change the arrivals after time t (drop them all, or add a burst); every online
policy's decisions before t must be identical, because nothing it observes before t can depend on
what arrives after t. The oracle, which reads the whole trace, is the positive control: its
decisions before t do change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from policy_cases import corridor_params, registered

from wadiloco.models.policies import POLICIES, make_policy
from wadiloco.models.policies.base import FutureView, PolicyContext, WhatIf
from wadiloco.models.routers import ROUTERS
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import Fleet, simulate

ROOT = Path(__file__).resolve().parents[2]
T_CUT = 60.0
SC = {"horizon_s": 110, "drain_s": 5, "merge.h_min": 24, "merge.h_max": 64, "policy.params.H": 48}
REF = {"merges": 3, "steps": 205}  # a fixed budget for the matched controls, so both runs get the same
# Every registered policy, chosen by its declared `oracle` capability (tests/policy_cases.py), read at
# import; `None` params mean its defaults fitted to the corridor above, a dict is an extra variant.
ONLINE = [pytest.param(n, None, id=n) for n in registered(lambda c: not c.oracle)] + [
    pytest.param(
        "online_forecast",
        {"forecaster": "holt_winters", "refit_s": 10, "season_s": 20},
        id="online_forecast-holt_winters",
    )
]
ORACLES = registered(lambda c: c.oracle)


def _perturb(arrivals: list[Arrivals], how: str, rng: np.random.Generator) -> list[Arrivals]:
    out = []
    for a in arrivals:
        keep = a.t < T_CUT
        t, p, o = a.t[keep], a.prompt[keep], a.output[keep]
        if how == "add":  # a dense burst right after the cut, plus the original later arrivals
            extra = np.sort(rng.uniform(T_CUT, T_CUT + 20.0, 400))
            t = np.concatenate([a.t[keep], extra, a.t[~keep]])
            p = np.concatenate([a.prompt[keep], rng.integers(200, 2000, 400), a.prompt[~keep]])
            o = np.concatenate([a.output[keep], rng.integers(50, 400, 400), a.output[~keep]])
            order = np.argsort(t, kind="stable")
            t, p, o = t[order], p[order], o[order]
        out.append(
            Arrivals(
                np.ascontiguousarray(t),
                np.ascontiguousarray(p, dtype=np.int64),
                np.ascontiguousarray(o, dtype=np.int64),
            )
        )
    return out


def _fitted(name: str) -> dict:
    return corridor_params(name, SC["merge.h_min"], SC["merge.h_max"], SC["policy.params.H"])


def _before(decisions, t):
    return [d for d in decisions if d[1] < t]


@pytest.fixture(scope="module")
def setting():
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), SC)
    sc = with_overrides(sc, {"workload.phase_s": 30.0})  # a burst at 30-60 s, then quiet
    base = Fleet(resolve(sc, "no_sync"), 0).arrivals
    rng = np.random.default_rng(0)
    return sc, {"same": base, "drop": _perturb(base, "drop", rng), "add": _perturb(base, "add", rng)}


@pytest.mark.parametrize("name,params", ONLINE)
def test_online_decisions_before_t_ignore_arrivals_after_t(setting, name, params):
    sc, arr = setting
    params = (
        corridor_params(name, SC["merge.h_min"], SC["merge.h_max"], SC["policy.params.H"]) if params is None else params
    )
    kw = {"reference_merges": REF["merges"], "reference_steps": REF["steps"]} if POLICIES[name].takes_reference else {}
    # Every run gets its arrivals injected, so every run observes on the same footing.
    runs = {k: simulate(sc, 0, name, params, arrivals=a, check=True, **kw) for k, a in arr.items()}
    base = _before(runs["same"].decisions, T_CUT)
    assert len(base) > 60  # ~90-120 inner steps before the cut (merges pause the islands)
    if POLICIES[name].respects_corridor:
        assert any(m for _, _, m in base)  # merges happen before the cut, so the test bites
    for k in ("drop", "add"):
        assert _before(runs[k].decisions, T_CUT) == base, f"{name}: decisions before t changed ({k})"
    # and the perturbation was real: the runs differ after the cut
    assert runs["drop"].summary["requests"] < runs["same"].summary["requests"] < runs["add"].summary["requests"]


@pytest.mark.parametrize("name", ORACLES)
def test_the_oracle_is_a_positive_control(setting, name):
    """An oracle reads the future, so moving load after t moves its earlier merges; this shows the
    metamorphic test above can detect a policy that looks ahead. (An oracle whose early decisions
    never depend on the future gains nothing from the privilege; it should not be one.)"""
    sc, arr = setting
    params = _fitted(name)
    kw = {"reference_merges": REF["merges"], "reference_steps": REF["steps"]} if POLICIES[name].takes_reference else {}
    a = simulate(sc, 0, name, params, arrivals=arr["same"], **kw)
    b = simulate(sc, 0, name, params, arrivals=arr["add"], **kw)
    assert _before(a.decisions, T_CUT) != _before(b.decisions, T_CUT)


def test_the_registry_has_an_oracle():
    """Without one, the positive control above runs for nobody and the boundary goes unchecked."""
    assert ORACLES


def test_online_policies_refuse_the_future():
    def simulate(steps):  # a stand-in simulator: every placement makes its merges, each costs one violation
        return WhatIf(len(steps), 1.0, tuple(steps), 8.0)

    fv = FutureView(np.array([1.0, 2.0]), 10.0, 0.5, 8, simulate)
    ctx = PolicyContext(128, 512, 0, reference_merges=1, reference_steps=300, rng=np.random.default_rng(0))
    for name, cls in POLICIES.items():
        pol = make_policy(name, {}, ctx)
        if cls.oracle:
            pol.prepare(fv)  # allowed
        else:
            with pytest.raises(PermissionError):
                pol.prepare(fv)


def test_fleet_hands_the_future_only_to_oracles(setting, monkeypatch):
    sc, _ = setting
    seen = []
    for name, cls in POLICIES.items():
        monkeypatch.setattr(cls, "prepare", lambda self, fv, n=name: seen.append(n), raising=True)
    kw = {"reference_merges": REF["merges"], "reference_steps": REF["steps"]}
    for name in POLICIES:
        Fleet(resolve(sc, name, _fitted(name)), 0, **kw)
    assert sorted(seen) == ORACLES != []


# Routers see only the present (models/routers/base.py): the sidecar each request before t went
# to cannot change when arrivals after t change. The rest of the registry runs under -m slow.
_FAST_ROUTERS = ("least_outstanding", "merge_aware", "random")
ROUTED = [
    pytest.param(n, marks=() if n in _FAST_ROUTERS else pytest.mark.slow, id=n)
    for n, c in sorted(ROUTERS.items())
    if not c.static
]


@pytest.mark.parametrize("name", ROUTED)
def test_routing_before_t_ignores_arrivals_after_t(setting, name):
    sc, arr = setting
    sc = with_overrides(sc, {"router.name": name})

    def routed(r):
        q = r.requests
        m = q["arrival"] < T_CUT
        return sorted(zip(q["arrival"][m].tolist(), q["prompt"][m].tolist(), q["sidecar"][m].tolist()))

    same = simulate(sc, 0, arrivals=arr["same"], check=True)
    add = simulate(sc, 0, arrivals=arr["add"], check=True)
    base = routed(same)
    assert len({s for _, _, s in base}) == sc.fleet.n_sidecars and same.summary["merges"] >= 1
    assert routed(add) == base, f"{name}: routing before t changed when arrivals after t did"
    assert add.summary["requests"] > same.summary["requests"]
