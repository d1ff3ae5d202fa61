"""Lookahead sources (sim.lookahead): every part of a fleet that touches or reads the engines at
instants it knows ahead is a `Source` (`next_touch_at`, `bound_changed`), registered in one place
(sim.fleet `_lookahead_sources`), and only the parts a scenario has are asked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.sim.fleet import Fleet

ROOT = Path(__file__).resolve().parents[2]
COTENANT = {"weight": 1.0, "timetable": {"kind": "periodic", "period_s": 20.0, "window_s": 5.0}}


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, ["merge", "trainer", "monitor"]),
        (
            {"router.name": "least_outstanding", "fleet.host_cores": 16},
            ["router", "merge", "trainer", "monitor", "hosts"],
        ),
        ({"cotenant": COTENANT}, ["merge", "trainer", "monitor", "cotenant"]),
        ({"disagg": {"prefill_sidecars": [0]}}, ["merge", "trainer", "monitor", "fed"]),  # (a feeder)
    ],
    ids=["plain", "router-cores", "cotenant", "disagg"],
)
def test_a_fleet_registers_exactly_the_sources_it_has(extra, expected):
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 30.0, **extra})
    f = Fleet(resolve(sc), 0)
    parts = {
        "fed": f.fed,
        "router": f.router,
        "merge": f.merge,
        "trainer": f.trainer,
        "monitor": f.monitor,
        "cotenant": f.cotenant,
        "hosts": f.res,
    }
    told = [k for k, x in parts.items() if x is not None and getattr(x, "bound_changed", None) == f.bound.changed]
    feeds = [k for k, x in parts.items() if x is not None and getattr(x, "bound_changed", None) == f.bound.fed_changed]
    assert told + feeds == expected and len(f.bound._sources) + len(f.bound._feeders) == len(expected)
    assert f.run().summary["requests"] > 0


def test_sources_are_registered_in_one_place():
    """Only the composition root registers sources; nothing wires a bound callback by hand."""
    calls = []
    for path in sorted((ROOT / "sim").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register":
                calls.append(path.name)
            if isinstance(node, ast.keyword) and node.arg == "bound_changed":
                calls.append(f"{path.name}: bound_changed=")
    assert calls == ["fleet.py"]
