"""The mechanism atlas: experiments/atlas.yaml's layout (designs x mitigations x regimes, every cell's
controls, the load axis), and a quick variant of it (one cell, its control, the cell at another load
and that load's control; 24-s windows, 2 seeds) through `wadiloco sweep` and `atlas_table --doc`."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import yaml

from wadiloco.experiments.studies import atlas_table as at
from wadiloco.experiments.sweep import execute_plan, load_sweep
from wadiloco.experiments.sweep.spec import read_spec

ROOT = Path(__file__).resolve().parents[2]
ATLAS = ROOT / "experiments" / "atlas.yaml"
POLICIES = {"no_sync", "fixed", "wa_diloco", "online_forecast", "overlap_oracle", "sim_oracle", "matched_random"}
DESIGNS, MITIGATIONS = ("v1", "v0", "shared", "shared_ts"), ("none", "async", "stagger", "streaming", "int8")
REGIMES = ("bursty", "aperiodic", "azure_conv", "mooncake")


def _atlas() -> dict:
    return yaml.safe_load(ATLAS.read_text(encoding="utf-8"))


def _entries() -> list:
    """The atlas' regimes as the sweep file gives them (products expanded, no scenario loaded)."""
    spec = read_spec(ATLAS)
    return [e for i, r in enumerate(spec.regimes) for e in r.expand(i)]


def test_the_atlas_crosses_designs_mitigations_regimes_loads_and_policies():
    names = [e.name for e in _entries()]
    assert len(names) == len(set(names))
    cells = [at.parse_regime(n) for n in names]
    assert all(c is not None for c in cells), "every regime is a cell, a cell at another load, or a control"
    key = lambda c: (c["design"], c["mitigation"], c["regime"])  # noqa: E731
    grid = {key(c) for c in cells if not c["unlimited"] and not c["load"]}
    assert set(itertools.product(DESIGNS, MITIGATIONS, REGIMES)) <= grid
    assert ("testbed", "none", "stage12") in grid
    # disaggregated serving (about 5x a colocated run): every regime unmitigated, every mitigation in mooncake
    disagg = {("disagg", "none", r) for r in REGIMES} | {("disagg", m, "mooncake") for m in MITIGATIONS}
    assert disagg == {c for c in grid if c[0] == "disagg"}
    # every cell has its controls at its own load: gpu and host, and the nic where KV crosses the network
    for cell in grid:
        want = {"gpu"} if cell[0] == "testbed" else {"gpu", "host", "nic"} if cell[0] == "disagg" else {"gpu", "host"}
        got = {c["unlimited"] for c in cells if key(c) == cell and c["unlimited"] and not c["load"]}
        assert got == want, (cell, got)
    # the load axis: every cell but the testbed's at three more loads; the unmitigated ones with controls
    for cell in grid - {("testbed", "none", "stage12")}:
        loads = {c["load"] for c in cells if key(c) == cell and c["load"] and not c["unlimited"]}
        assert len(loads) == 3, (cell, loads)
        if cell[1] == "none":
            assert {c["load"] for c in cells if key(c) == cell and c["load"] and c["unlimited"]} == loads
    assert {p["name"] for p in _atlas()["policies"]} == POLICIES


@pytest.mark.slow
def test_every_atlas_cell_validates():
    plan = load_sweep(ATLAS)  # every cell's scenario and policy validates (about 5 s: 68 scenarios)
    assert len(plan.regimes) == len(_atlas()["regimes"])


QUICK = {"v1__none__bursty", "v1__none__bursty__unl-host", "v1__none__bursty__load-0.85",
         "v1__none__bursty__load-0.85__unl-host"}  # fmt: skip


def _quick(tmp_path: Path) -> Path:
    """atlas.yaml cut to one cell (v1, none, bursty), its host control, the cell at load 0.85 and that
    load's host control, 24-s windows on 2 seeds."""
    spec = _atlas()
    regimes = []
    for e in _entries():
        if e.name in QUICK:
            over = {**e.overrides, "drain_s": 5, "merge.h_min": 16, "merge.h_max": 32}
            regimes.append({"path": str((ATLAS.parent / e.path).resolve()), "name": e.name, "overrides": over})
    pols = []
    for p in spec["policies"]:
        if p.get("label") == "fixed_tb" or p["name"] == "online_forecast":
            continue
        p = {**p, "draws": 1} if "draws" in p else dict(p)
        if "regimes" in p:
            p["regimes"] = [n for n in sorted(QUICK) if n == "v1__none__bursty" or p.get("name") == "fixed"]
        if p.get("name") == "fixed":
            p["params"] = {"H": 16}
        pols.append(p)
    spec.update(regimes=regimes, policies=pols, seeds=2, horizon_s=24, bootstrap={"n_resamples": 200, "seed": 0})
    path = tmp_path / "atlas_quick.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_quick_atlas_writes_its_doc_page_section(tmp_path):
    sweep, keep = _quick(tmp_path), QUICK
    out = tmp_path / "out"
    oc = execute_plan(load_sweep(sweep), out, workers=1, progress=False)  # no report: the table needs none
    assert oc.errors == 0 and oc.ran == 24
    page = tmp_path / "docs" / "atlas.md"
    page.parent.mkdir()
    page.write_text(f"# x\n\n{at.START}\nstale table\n{at.END}\n\nafter\n", encoding="utf-8")
    assert at.main([str(out), "--doc", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "stale table" not in text and text.endswith(f"{at.END}\n\nafter\n")
    assert "## When is a merge safe?" in text and "24 runs: 2 seeds, 24 s windows" in text
    assert "![the atlas: sync-excess and placement gain per cell](atlas.png)" in text  # beside the page
    assert "![the atlas by load: fixed's sync-excess per cell and load](atlas_loads.png)" in text
    for png in ("atlas.png", "atlas_loads.png"):
        assert (tmp_path / "docs" / png).read_bytes()[:4] == b"\x89PNG"
    assert "**v1**:" in text and "unlimited: [host]" in text
    cells = {r["name"]: r for r in at.cells(out)}
    assert set(cells) == keep
    r = cells["v1__none__bursty"]
    for key in ("se_fixed", "se_wa", "gain_overlap", "gain_sim", "gain_wa"):
        assert len(r[key]) in (3, 4) and r[key][0] == r[key][0], key  # a mean (not NaN)
    assert r["merges_wa"] >= 1 and r["steps_wa"] > 0
    assert r["at"] == 0.45 and cells["v1__none__bursty__load-0.85"]["at"] == 0.85  # the plan's loads
    assert r["decision"]["text"] and cells["v1__none__bursty__load-0.85"]["decision"]["text"] != "no control ran"
    table = [ln for ln in text.splitlines() if ln.startswith("| v1 |")]
    assert len(table) == 2  # the cell, and its row by load; the controls are in the paragraph and the tables
    assert "| v1 | none | bursty | 0.45: " in text and " | 0.85: " in text


def _rec(se, unl="", load="", at_=0.45, regime="bursty"):
    return {"name": "x", "design": "v0", "mitigation": "none", "regime": regime, "load": load, "unlimited": unl,
            "at": at_, "se_fixed": se, "se_wa": (math.nan,) * 3}  # fmt: skip


@pytest.mark.parametrize(
    "cell,controls,text",
    [
        ((0.04, 0.01, 0.08), [(0.04, 0.01, 0.08), (0.0, math.nan, math.nan)], "host (100%)"),
        ((0.04, -0.01, 0.08), [(0.0, math.nan, math.nan)], "no effect"),
        ((0.0, math.nan, math.nan), [(0.0, math.nan, math.nan)], "no effect"),
        ((0.04, 0.01, 0.08), [(0.03, 0.01, 0.05), (0.035, 0.0, 0.06)], "no single resource (gpu 25%)"),
        ((-0.03, -0.05, -0.01), [(0.0, math.nan, math.nan), (-0.03, -0.05, -0.01)], "gpu (100%)"),
        ((0.23, math.nan, math.nan), [(0.0, math.nan, math.nan)], "gpu (100%)"),  # no variance, still an effect
        ((0.04, 0.01, 0.08), [], "no control ran"),
    ],
)
def test_each_cell_names_its_deciding_resource(cell, controls, text):
    ctl = [_rec(c, unl=u) for c, u in zip(controls, ("gpu", "host") if len(controls) > 1 or text.startswith("h")
                                          else ("gpu",))]  # fmt: skip
    if text.startswith("host"):
        ctl = [_rec(controls[0], unl="gpu"), _rec(controls[1], unl="host")]
    assert at.decide(_rec(cell), ctl)["text"] == text


def test_the_load_axis_says_where_merges_stop_being_safe():
    recs = [_rec((0.0, math.nan, math.nan), at_=0.25, load="0.25"), _rec((0.001, -0.001, 0.003)),
            _rec((0.012, 0.004, 0.02), at_=0.65, load="0.65"), _rec((0.0, math.nan, math.nan), at_=0.65,
            load="0.65", unl="host"), _rec((0.04, 0.02, 0.06), at_=0.85, load="0.85")]  # fmt: skip
    for r in recs:
        if not r["unlimited"]:
            r["decision"] = at.decide(r, at.controls_of(recs, r))
    text = at.safe_up_to(recs, "v0")
    assert "bursty safe to 0.45, unsafe from 0.65 (+1.20 [+0.40, +2.00] pp; host (100%))" in text
    rows = at.load_table(recs)
    assert (
        rows[2].startswith("| v0 | none | bursty | 0.25: +0.00 | 0.45: +0.10 [-0.10, +0.30] |")
        and "0.65: +1.20 [+0.40, +2.00] · host (100%)" in rows[2]
    )
    recs_safe = [r for r in recs if r["at"] is not None and r["at"] < 0.6]
    assert "bursty safe at every load run (to 0.45)" in at.safe_up_to(recs_safe, "v0")


@pytest.mark.parametrize(
    "name,parts",
    [
        ("v1__none__bursty", ("v1", "none", "bursty", "", "")),
        ("shared__none__bursty__unl-gpu", ("shared", "none", "bursty", "", "gpu")),
        ("v0__int8__mooncake__load-0.65", ("v0", "int8", "mooncake", "0.65", "")),
        ("v0__none__bursty__load-0.65__unl-host", ("v0", "none", "bursty", "0.65", "host")),
        ("bursty", None),
        ("a__b__c__d", None),
        ("a__b__c__unl-gpu__load-0.5", None),
    ],
)
def test_regime_names_parse(name, parts):
    got = at.parse_regime(name)
    assert (got and tuple(got.values())) == parts if parts else got is None


def test_disaggregated_paragraph_quotes_the_kv_hand_offs():
    """A design whose runs report KV hand-offs (disagg:) says how long they took with and without
    merges, in its unmitigated bursty cell and under each of that cell's controls."""

    def rec(unl, kv, se):
        return {"name": "x", "design": "disagg", "mitigation": "none", "regime": "bursty", "unlimited": unl,
                "load": "", "at": 0.3, "se_fixed": (se, se, se), "se_wa": (se, se, se), "kv_s": kv}  # fmt: skip

    recs = [rec("", {"no_sync": 0.0300, "fixed": 0.0312}, 0.001), rec("nic", {"no_sync": 0.0004, "fixed": 0.0004}, 0.0)]
    recs[0]["decision"] = at.decide(recs[0], recs[1:])
    text = at.paragraphs(recs)[0]
    assert "KV hand-offs in none / bursty: 30.0 ms without merges, 31.2 ms with fixed's" in text
    assert "`unlimited: [nic]` 0.4 ms without merges, 0.4 ms with fixed's." in text
    assert "Deciding resource: **nic**" in text
