"""Regime lists as products (`regimes[].product`) and groups (`regimes[].group`): a product gives the
same regimes, scenario hashes and runs as the hand-written list it stands for, and every mistake in
one is an input error naming the file and the field. The atlas uses both (experiments/atlas.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wadiloco.experiments.sweep import load_sweep
from wadiloco.models.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SCN = ROOT / "scenarios"
SMALL = {"fleet.islands": 2, "fleet.hosts_per_island": 1, "merge.h_min": 16, "merge.h_max": 48}
POLICIES = [{"name": "no_sync"}, {"name": "fixed", "params": {"H": 16}}]


def _write(tmp_path: Path, regimes: list, policies=None, name: str = "s.yaml") -> Path:
    d = {"regimes": regimes, "policies": policies or POLICIES, "seeds": 2, "horizon_s": 30}
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    return p


def _product() -> dict:
    return {
        "product": {
            "design": {"v1": {}, "v0": {"engine.step": "sequential"}},
            "mitigation": {"none": {}, "async": {"merge.checkpoint_mode": "async"}},
            "workload": {"normal": str(SCN / "normal.yaml"), "bursty": str(SCN / "bursty.yaml")},
        },
        "overrides": SMALL,
        "group": "cells",
    }


def _hand() -> list:
    designs = {"v1": {}, "v0": {"engine.step": "sequential"}}
    mitigations = {"none": {}, "async": {"merge.checkpoint_mode": "async"}}
    out = []
    for d, do in designs.items():
        for m, mo in mitigations.items():
            for w in ("normal", "bursty"):
                out.append({"path": str(SCN / f"{w}.yaml"), "name": f"{d}__{m}__{w}", "overrides": SMALL | do | mo})
    return out


def test_a_product_is_the_hand_list_it_stands_for(tmp_path):
    a = load_sweep(_write(tmp_path, [_product()], name="product.yaml"))
    b = load_sweep(_write(tmp_path, _hand(), name="hand.yaml"))
    assert [r.name for r in a.regimes][:3] == ["v1__none__normal", "v1__none__bursty", "v1__async__normal"]
    assert [(r.name, r.digest) for r in a.regimes] == [(r.name, r.digest) for r in b.regimes]
    assert [t.key for t in a.tasks()] == [t.key for t in b.tasks()]
    assert a.identity() == b.identity()  # the same run set, so one resumes the other's folder
    assert {r.load for r in a.regimes} == {0.5, 0.45}  # each scenario's workload.load, kept in the plan


def test_levels_override_the_entry_and_later_axes_win(tmp_path):
    entry = {
        "product": {
            "workload": {"bursty": str(SCN / "bursty.yaml")},
            "load": {"load-0.3": {"workload.load": 0.3}, "load-0.9": {"workload.load": 0.9}},
        },
        "overrides": {**SMALL, "workload.load": 0.1},
    }
    plan = load_sweep(_write(tmp_path, [entry]))
    assert [(r.name, r.load) for r in plan.regimes] == [("bursty__load-0.3", 0.3), ("bursty__load-0.9", 0.9)]
    shared = {"path": str(SCN / "bursty.yaml"), "product": {"load": {"a": {"workload.load": 0.2}}}, "overrides": SMALL}
    assert [r.name for r in load_sweep(_write(tmp_path, [shared], name="p.yaml")).regimes] == ["a"]


def test_policies_name_groups(tmp_path):
    control = {"path": str(SCN / "normal.yaml"), "name": "ctl", "overrides": {**SMALL, "fleet.unlimited": ["host"]}}
    pols = [{"name": "no_sync"}, {"name": "fixed", "params": {"H": 16}, "regimes": ["cells"]}]
    pols += [{"name": "wa_diloco", "regimes": ["ctl", "cells"]}]
    plan = load_sweep(_write(tmp_path, [_product(), control], pols))
    arms = {a.label: a for a in plan.arms}
    cells = tuple(r.name for r in plan.regimes if r.name != "ctl")
    assert arms["fixed"].regimes == cells and len(cells) == 8
    assert arms["wa_diloco"].regimes == (*cells, "ctl")  # in the sweep's order, each once


BAD = [
    ("two path axes", lambda e: e["product"].update(other={"x": str(SCN / "normal.yaml")}), "regimes.0", "one axis"),
    ("path and a path axis", lambda e: e.update(path=str(SCN / "normal.yaml")), "regimes.0", "`path` is set too"),
    ("no scenario", lambda e: e["product"].pop("workload"), "regimes.0", "one scenario"),
    ("a name", lambda e: e.update(name="x"), "regimes.0", "remove `name`"),
    ("a mixed axis", lambda e: e["product"]["design"].update(v2="x.yaml"), "regimes.0", "mixes"),
    ("an empty axis", lambda e: e["product"].update(load={}), "regimes.0", "no levels"),
    ("a bad level name", lambda e: e["product"]["design"].update({"a__b": {}}), "regimes.0", "level names"),
    (
        "a missing scenario",
        lambda e: e["product"]["workload"].update(x="no/such.yaml"),
        "regimes.0.product.workload.x",
        "not found",
    ),  # fmt: skip
    (
        "a bad override",
        lambda e: e["product"]["design"].update(v2={"fleet.islandz": 2}),
        "regimes.0.product.design.v2.fleet.islandz",
        "",
    ),  # fmt: skip
    ("a group named like a regime", lambda e: e.update(group="v1__none__normal"), "regimes.0.group", "regime's name"),
]


@pytest.mark.parametrize("case,mutate,field,words", BAD, ids=[b[0] for b in BAD])
def test_bad_products_name_file_and_field(tmp_path, case, mutate, field, words):
    entry = _product()
    mutate(entry)
    path = _write(tmp_path, [entry])
    with pytest.raises(InputError) as e:
        load_sweep(path)
    assert e.value.where == field and words in e.value.message and str(path) in str(e.value), (case, e.value)


def test_duplicate_names_and_unknown_groups_are_named(tmp_path):
    with pytest.raises(InputError) as e:
        load_sweep(_write(tmp_path, [_product(), _product()]))
    assert e.value.where == "regimes.1.product" and "v1__none__normal" in e.value.message
    pols = [*POLICIES[:1], {"name": "fixed", "params": {"H": 16}, "regimes": ["celss"]}]
    with pytest.raises(InputError) as e:
        load_sweep(_write(tmp_path, [_product()], pols))
    assert e.value.where == "policies.1.regimes.0" and "cells" in e.value.message


def test_a_huge_product_is_refused_before_any_scenario_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("WADILOCO_MAX_RUNS", "10")
    with pytest.raises(InputError) as e:
        load_sweep(_write(tmp_path, [_product()]))
    assert e.value.where == "regimes" and "16" in e.value.message
