"""Performance shortcuts change no result (issue 16; speed itself lives in `python -m wadiloco.benchmarks`).

* sim/monitor.py lazy samples: a fleet whose engine columns are read back from the request times
  (`lazy_ok`) gives the same timeline, decisions and request table as one sampled eagerly, and its
  monitor is no lookahead source (fewer SimPy events).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import wadiloco.sim.monitor as monitor
from wadiloco.benchmarks.bursty import event_mark, processed_events
from wadiloco.models.config import load_scenario, resolve, with_overrides
from wadiloco.sim.fleet import Fleet

ROOT = Path(__file__).resolve().parents[1]
CORRIDOR = {"merge.h_min": 16, "merge.h_max": 32}


def _run(name: str, overrides: dict, lazy: bool, monkeypatch):
    if not lazy:
        monkeypatch.setattr(monitor, "lazy_ok", lambda sidecars: False)
    sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    sc = with_overrides(sc, {"horizon_s": 20.0, "drain_s": 5.0, **overrides})
    fleet = Fleet(resolve(sc), 3)
    mark = event_mark(fleet.env)
    res = fleet.run()
    monkeypatch.undo()
    return fleet, res, processed_events(fleet.env, mark)


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("bursty", {"policy": {"name": "pressure_gated", "params": {"H": 24, "threshold": 0.3}}, **CORRIDOR}),
        ("azure_conv", {"policy": {"name": "wa_diloco", "params": {}}, **CORRIDOR}),
        ("normal", {"engine.step": "sequential", "engine.fast_forward": False, "monitor.sample_s": 0.5}),
    ],
)
def test_lazy_monitor_matches_eager(name, overrides, monkeypatch):
    f_lazy, lazy, ev_lazy = _run(name, overrides, True, monkeypatch)
    f_eager, eager, ev_eager = _run(name, overrides, False, monkeypatch)
    assert f_lazy.monitor.lazy and not f_eager.monitor.lazy
    assert lazy.summary["merges"] >= 1 or name == "normal"
    assert lazy.timeline.keys() == eager.timeline.keys()
    for k in eager.timeline:
        assert np.array_equal(lazy.timeline[k], eager.timeline[k]), k
    assert max(eager.timeline["queue"]) > 0 and max(eager.timeline["running"]) > 0
    assert lazy.decisions == eager.decisions
    for k in eager.requests:
        assert np.array_equal(lazy.requests[k], eager.requests[k], equal_nan=True), k
    assert ev_lazy < ev_eager  # the engines no longer stop at every sample


@pytest.mark.parametrize(
    "overrides",
    [
        {"engine.kv_blocks": 4000},
        {"router.name": "least_outstanding"},
        {"workload": {"kind": "closed_loop", "concurrency": {"kind": "steady", "c": 4}}},
    ],
)
def test_lazy_monitor_only_where_exact(overrides):
    """Preemption (a request admitted twice), a router (arrivals handed over as they come) and a
    closed loop (requests created as others finish) keep the eager samples."""
    sc = load_scenario(ROOT / "scenarios" / "bursty.yaml")
    sc = with_overrides(sc, {"horizon_s": 5.0, **overrides})
    assert not Fleet(resolve(sc), 0).monitor.lazy
