"""Routers in front of the sidecars (models/routers, sim/routing.py): `static` is today's dealing,
byte for byte; join-the-shortest-queue beats round robin when one sidecar is slowed; each router
does what its name says on a hand-made view. Fast-forward and lookahead with a router are cases
of tests/sim/test_queueing.py (bursty-router-kv); the oracle boundary, tests/policies/test_oracle_boundary.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wadiloco.experiments.stats import bootstrap_mean_ci
from wadiloco.models.errors import InputError
from wadiloco.models.routers import ROUTERS, describe_routers
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.sim.fleet import simulate

ROOT = Path(__file__).resolve().parents[2]
SLOW = {"timetable": {"kind": "periodic", "period_s": 10.0, "window_s": 10.0}, "weight": 3.0, "sidecars": [0]}


def _sc(extra: dict):
    sc = load_scenario(ROOT / "scenarios" / "normal.yaml")
    base = {"horizon_s": 40.0, "drain_s": 30.0, "fleet.islands": 2, "policy.name": "no_sync", "policy.params": {}}
    return with_overrides(sc, {**base, **extra})


def test_static_is_todays_dealing():
    sc = _sc({})
    static = with_overrides(sc, {"router.name": "static"})
    assert static.digest() == sc.digest()
    a, b = simulate(sc, 1), simulate(static, 1)
    for k in a.requests:
        np.testing.assert_array_equal(a.requests[k], b.requests[k], err_msg=k)
    assert "router" not in b.summary


def test_least_outstanding_beats_round_robin_on_a_slowed_sidecar():
    """A co-tenant takes 3/4 of sidecar 0's GPU all run long: round robin keeps giving it a quarter
    of the load and its queue grows; join-the-shortest-queue sends it less. Paired over 5 seeds."""
    sc = _sc({"cotenant": SLOW})
    diff, shares = [], []
    for seed in range(5):
        rr = simulate(with_overrides(sc, {"router.name": "round_robin"}), seed).summary
        lo = simulate(with_overrides(sc, {"router.name": "least_outstanding"}), seed).summary
        diff.append(lo["e2e_p95_s"] - rr["e2e_p95_s"])
        shares.append(lo["router"]["routed"][0] / sum(lo["router"]["routed"]))
        assert rr["router"]["routed"][0] >= max(rr["router"]["routed"][1:])  # in turn: the slow one gets its quarter
    ci = bootstrap_mean_ci(np.array(diff))
    assert ci.high < 0, f"least_outstanding - round_robin p95 E2E: {ci}"
    assert max(shares) < 0.2  # the slowed sidecar gets well under a quarter


class FakeView:
    def __init__(self, outstanding, kv, pressing):
        self.n, self._o, self._kv, self._p = len(outstanding), outstanding, kv, pressing

    def outstanding(self, s):
        return self._o[s]

    def kv_free(self, s):
        return self._kv[s]

    def pressing(self, s):
        return self._p[s]


def _router(name, **params):
    cls = ROUTERS[name]
    return cls(cls.Params(**params), np.random.default_rng(0))


def test_each_router_on_a_hand_made_view():
    v = FakeView([5, 2, 2, 9], [10, 40, 30, 50], [False, True, False, False])
    assert [_router("round_robin").route(v, 10, 10, -1) for _ in range(1)] == [0]
    rr = _router("round_robin")
    assert [rr.route(v, 1, 1, -1) for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    assert _router("least_outstanding").route(v, 1, 1, -1) == 1  # ties: the lowest index
    assert _router("least_kv").route(v, 1, 1, -1) == 3
    assert _router("merge_aware").route(v, 1, 1, -1) == 2  # sidecar 1 is pressed by a merge
    assert _router("merge_aware").route(FakeView([3, 1], [1, 1], [True, True]), 1, 1, -1) == 1  # all pressed
    pa = _router("prefix_affinity", max_imbalance=3)
    home = [pa.route(v, 1, 1, key) for key in range(40)]
    assert len(set(home)) > 1 and 3 not in home  # sidecar 3 is 7 over the least loaded: balanced away
    assert pa.route(v, 1, 1, 17) == pa.route(v, 1, 1, 17) and pa.route(v, 1, 1, -1) == 1
    draws = [_router("random").route(v, 1, 1, -1) for _ in range(3)]
    assert draws == [_router("random").route(v, 1, 1, -1) for _ in range(3)]  # seeded


def test_unknown_router_and_closed_loops_are_input_errors():
    with pytest.raises(InputError, match="unknown router 'nearest'"):
        simulate(_sc({"router.name": "nearest"}), 0)
    closed = {"workload": {"kind": "closed_loop", "concurrency": {"kind": "steady", "c": 4}}, "router.name": "random"}
    with pytest.raises(InputError, match="router.name: random routes arrivals, but a closed-loop workload has none"):
        simulate(_sc(closed), 0)


def test_routers_cli_lists_every_router_with_its_params():
    out = subprocess.run(
        [sys.executable, "-m", "wadiloco.experiments.cli", "routers", "--json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["name"] for r in rows] == sorted(ROUTERS) == [r["name"] for r in describe_routers()]
    assert {r["name"]: r["params"] for r in rows}["prefix_affinity"] == {"max_imbalance": 8}
