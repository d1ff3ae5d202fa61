"""Shared busy periods (models.engine.tape): a run that replays the no_sync run's tape of its
seed gives the very results of a run that simulates everything, on every shipped regime; the tape is
actually used where the fleet allows it, refused where it does not, and a wrong tape would show."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shipped import SCENARIOS, load_shipped

from wadiloco.experiments import runner
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.sim.fleet import Fleet

ROOT = Path(__file__).resolve().parents[2]
# merges every ~12 s of a 30-s window: fixed H=24 in a corridor that admits it
MERGING = {"horizon_s": 30.0, "drain_s": 2.0, "merge.h_min": 16, "merge.h_max": 32}
FIXED = {"policy": {"name": "fixed", "params": {"H": 24}}}


def _scenario(path: Path):
    sc = load_shipped(path)
    if path.parent.name == "testbed":  # its own replayed schedule (merge windows of a co-tenant)
        return with_overrides(sc, {"horizon_s": 30.0, "drain_s": 2.0})
    return with_overrides(sc, {**MERGING, **FIXED})


def _tapes(sc, seed: int):
    base = Fleet(resolve(sc, "no_sync"), seed)
    if not base.share(None):
        return None
    base.run()
    return base.tapes()


def assert_same(a, b) -> None:
    assert a.requests.keys() == b.requests.keys()
    for k in a.requests:
        assert np.array_equal(a.requests[k], b.requests[k], equal_nan=a.requests[k].dtype.kind == "f"), k
    for k in a.timeline:
        assert np.array_equal(a.timeline[k], b.timeline[k]), k
    assert a.decisions == b.decisions
    assert [(m.start, m.end, m.phases) for m in a.merges] == [(m.start, m.end, m.phases) for m in b.merges]
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_time_s"), sb.pop("wall_time_s")
    assert repr(sa) == repr(sb)


def _replayed(sc, seed: int, tapes):
    f = Fleet(resolve(sc), seed)
    assert f.share(tapes)
    return f, f.run()


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_a_run_on_tape_gives_what_a_full_run_gives(path):
    sc = _scenario(path)
    tapes = _tapes(sc, 1)
    full = Fleet(resolve(sc), 1).run()
    if tapes is None:  # a KV pool, a closed loop, a router, disagg or a remote pool: never on tape
        assert not Fleet(resolve(sc), 1).shareable()
        return
    fleet, res = _replayed(sc, 1, tapes)
    assert_same(full, res)
    if path.parent.name != "testbed" and any(t is not None for t in tapes):
        assert len(res.merges) >= 1
        assert sum(s.core.tape.jumps for s in fleet.sidecars if s.core.tape is not None) > 0, "nothing was skipped"


def test_the_main_regimes_are_on_tape_before_their_first_merge():
    """The paper's regimes share every engine's trajectory up to the first merge (the snapshot before it)."""
    for name in ("bursty", "normal", "pressure_heavy"):
        sc = with_overrides(load_scenario(ROOT / "scenarios" / f"{name}.yaml"), {**MERGING, **FIXED})
        tapes = _tapes(sc, 0)
        assert all(t is not None for t in tapes), name
        fleet, res = _replayed(sc, 0, tapes)
        assert_same(Fleet(resolve(sc), 0).run(), res)
        first = res.merges[0].start
        for s in fleet.sidecars:
            assert s.core.tape.jumps >= 1, (name, s.idx)
        # (the jump lands on the last snapshot before the decision that starts the first merge)
        assert first > 2.0


def test_idle_instants_put_an_engine_back_on_tape():
    """Low load: engines go idle between requests, so after a merge they wake for the same request at
    the same instant as the baseline and copy its busy periods; iteration counts stay each run's own."""
    sc = with_overrides(
        load_scenario(ROOT / "scenarios" / "aperiodic.yaml"), {**MERGING, **FIXED, "workload.load": 0.05}
    )
    tapes = _tapes(sc, 2)
    fleet, res = _replayed(sc, 2, tapes)
    full_fleet = Fleet(resolve(sc), 2)
    full = full_fleet.run()
    assert_same(full, res)
    assert sum(s.core.tape.periods for s in fleet.sidecars) > 0
    assert [s.core.diter for s in fleet.sidecars] == [s.core.diter for s in full_fleet.sidecars]


def test_a_wrong_tape_shows_in_the_results():
    """The comparison above can fail: a tape whose rows are off changes the requests it copies."""
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {**MERGING, **FIXED})
    tapes = _tapes(sc, 0)
    tapes[0].rows[0][100:150] += 1e-9  # admission times at ~3-5 s, which the first jump (2 s to 10 s) copies
    _, res = _replayed(sc, 0, tapes)
    with pytest.raises(AssertionError):
        assert_same(Fleet(resolve(sc), 0).run(), res)


def test_a_tape_of_other_requests_is_not_used():
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {**MERGING, **FIXED})
    f = Fleet(resolve(sc), 5)
    f.share(_tapes(sc, 4))  # another seed's arrivals
    assert all(s.core.tape is None for s in f.sidecars)


@pytest.mark.parametrize(
    "overrides",
    [{"engine.kv_blocks": 900}, {"router.name": "least_outstanding"}, {"engine.prefix_cache": 10**6}],
    ids=["kv", "router", "prefix"],
)
def test_fleets_whose_engines_cannot_be_replayed_refuse_tapes(overrides):
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {**MERGING, **FIXED, **overrides})
    assert not Fleet(resolve(sc), 0).share(None)


def test_run_one_shares_and_can_be_switched_off(monkeypatch):
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {**MERGING, **FIXED})
    monkeypatch.setattr(runner, "_tapes", type(runner._tapes)())
    off = runner.run_one(sc, 3)  # a single run does not share (it would pay for the no_sync run)
    assert not runner._tapes
    on = runner.run_one(sc, 3, share=True)
    assert list(runner._tapes) == [(sc.digest(), 3)]  # the no_sync run it made first, kept for the next
    assert_same(off, on)
    again = runner.run_one(
        sc, 3, "matched_random", {"reference": "fixed", "reference_params": {"H": 24}}, draw=2, share=True
    )
    assert len(runner._tapes) == 1 and again.summary["merges"] == on.summary["merges"]
    monkeypatch.setenv(runner.SHARE_ENV, "0")
    assert not runner.sharing_on()  # what a sweep's worker asks (experiments/sweep/worker.py)
    monkeypatch.setenv(runner.SHARE_ENV, "1")
    assert runner.sharing_on()
