"""One builder for a run's result (models/results/run.py): the request table, the summary and the
invariants, with the extras a scenario adds (KV pools, prefix caches, a router, disaggregated or
pooled engines, a co-tenant, testbed labels, clients, an oracle's search) through one protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wadiloco.models.results.invariants import InvariantError
from wadiloco.models.results.run import NoExtra, build_requests, build_summary, check_run, merge_rows
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.run import SLOSpec
from wadiloco.sim.fleet import simulate
from wadiloco.sim.training import MergeRecord

ROOT = Path(__file__).resolve().parents[2]
SLO = SLOSpec(1.0, 0.1, None)
NAN = float("nan")


def _per_sidecar():
    t = np.array([0.0, 1.0, 2.0])
    one = np.ones(3, dtype=np.int64)
    return [(t, one * 10, one * 5, t + 0.1, t + 0.2, np.array([0.5, 1.5, NAN]))]


class _Tagged(NoExtra):
    def __init__(self, name: str, fail: bool = False):
        self.name, self.fail = name, fail

    def columns(self, req, merges):
        return {f"{self.name}_col": np.arange(len(req["arrival"]))}

    def summary(self, req, merges):
        return {self.name: len(merges)}

    def check(self, req, merges):
        if self.fail:
            raise InvariantError(f"{self.name} failed")


def test_extras_add_columns_and_keys_after_the_core_ones_in_their_order():
    merges = [MergeRecord(0, 8, 0.5, 0.6, 0.9, {"stage": (0.6, 0.9)})]
    plain = build_requests(_per_sidecar(), merges, SLO, [])
    extras = [_Tagged("b"), _Tagged("a")]
    req = build_requests(_per_sidecar(), merges, SLO, extras)
    assert list(req) == [*plain, "b_col", "a_col"]
    core = build_summary(plain, merges, SLO, {"seed": 3}, [])
    summary = build_summary(req, merges, SLO, {"seed": 3}, extras)
    assert list(summary) == [*core, "b", "a"] and summary["seed"] == 3
    assert repr({k: v for k, v in summary.items() if k in core}) == repr(core)  # the core figures do not move
    assert merge_rows(merges)[0]["stage_end_s"] == 0.9


def test_an_extra_column_of_the_wrong_length_or_name_is_refused():
    class Short(NoExtra):
        def columns(self, req, merges):
            return {"x": np.zeros(1)}

    class Clash(NoExtra):
        def columns(self, req, merges):
            return {"arrival": np.zeros(3)}

    for bad in (Short(), Clash()):
        with pytest.raises(ValueError, match="column"):
            build_requests(_per_sidecar(), [], SLO, [bad])


def test_every_extra_is_checked():
    req = build_requests(_per_sidecar(), [], SLO, [])
    check_run(req, [], 3, 0.5, [_Tagged("a")])
    with pytest.raises(InvariantError, match="b failed"):
        check_run(req, [], 3, 0.5, [_Tagged("a"), _Tagged("b", fail=True)])
    with pytest.raises(InvariantError, match="conservation"):
        check_run(req, [], 4, 0.5, [])


def test_a_fleets_extras_add_only_their_keys():
    """A KV pool and a router add their summary keys after the plain run's, which keep their order."""
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 30.0, "drain_s": 5.0})
    plain = simulate(sc, 0).summary
    more = simulate(with_overrides(sc, {"engine.kv_blocks": 4000, "router.name": "round_robin"}), 0).summary
    assert list(more)[: len(plain)] == list(plain)
    assert list(more)[len(plain) :] == ["preemptions", "rejected_too_long", "kv_usage_peak", "kv_usage_mean", "router"]
