"""The mechanism atlas: experiments/atlas.yaml's layout, and a quick variant of it
(one cell and its control, 24-s windows, 2 seeds) through `wadiloco sweep` and `atlas_table --doc`."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from wadiloco.experiments.studies import atlas_table as at
from wadiloco.experiments.sweep import execute_plan, load_sweep

ROOT = Path(__file__).resolve().parents[2]
ATLAS = ROOT / "experiments" / "atlas.yaml"
POLICIES = {"no_sync", "fixed", "wa_diloco", "online_forecast", "overlap_oracle", "sim_oracle", "matched_random"}


def _atlas() -> dict:
    return yaml.safe_load(ATLAS.read_text(encoding="utf-8"))


def test_the_atlas_crosses_designs_mitigations_regimes_and_policies():
    spec = _atlas()
    names = [r["name"] for r in spec["regimes"]]
    cells = [at.parse_regime(n) for n in names]
    assert all(c is not None for c in cells), "every regime is a cell or a control"
    grid = {(c["design"], c["mitigation"], c["regime"]) for c in cells if not c["unlimited"]}
    designs, mitigations = ("v1", "v0", "shared", "shared_ts"), ("none", "async", "stagger", "streaming", "int8")
    regimes = ("bursty", "aperiodic", "azure_conv", "mooncake")
    assert set(itertools.product(designs, mitigations, regimes)) <= grid
    assert ("testbed", "none", "stage12") in grid
    # disaggregated serving (about 5x a colocated run): every regime unmitigated, every mitigation in mooncake
    disagg = {("disagg", "none", r) for r in regimes} | {("disagg", m, "mooncake") for m in mitigations}
    assert disagg == {c for c in grid if c[0] == "disagg"}
    controls = {(c["design"], c["unlimited"]) for c in cells if c["unlimited"]}
    extra = {("testbed", "gpu"), ("disagg", "gpu"), ("disagg", "host"), ("disagg", "nic")}
    assert {(d, r) for d in designs for r in ("gpu", "host")} | extra == controls
    assert {p["name"] for p in spec["policies"]} == POLICIES


@pytest.mark.slow
def test_every_atlas_cell_validates():
    plan = load_sweep(ATLAS)  # every cell's scenario and policy validates (about 5 s: 68 scenarios)
    assert len(plan.regimes) == len(_atlas()["regimes"])


QUICK = {"v1__none__bursty", "v1__none__bursty__unl-host"}


def _quick(tmp_path: Path) -> Path:
    """atlas.yaml cut to one cell (v1, none, bursty) and its host control, 24-s windows on 2 seeds."""
    spec = _atlas()
    keep = QUICK
    regimes = []
    for r in spec["regimes"]:
        if r["name"] in keep:
            r = {**r, "path": str((ATLAS.parent / r["path"]).resolve())}
            r["overrides"] = {**r["overrides"], "drain_s": 5, "merge.h_min": 16, "merge.h_max": 32}
            regimes.append(r)
    pols = []
    for p in spec["policies"]:
        if p.get("label") == "fixed_tb" or p["name"] == "online_forecast":
            continue
        p = {**p, "draws": 1} if "draws" in p else dict(p)
        if "regimes" in p:
            p["regimes"] = [n for n in p["regimes"] if n in keep]
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
    assert oc.errors == 0 and oc.ran == 16
    page = tmp_path / "docs" / "atlas.md"
    page.parent.mkdir()
    page.write_text(f"# x\n\n{at.START}\nstale table\n{at.END}\n\nafter\n", encoding="utf-8")
    assert at.main([str(out), "--doc", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "stale table" not in text and text.endswith(f"{at.END}\n\nafter\n")
    assert "## When is a merge safe?" in text and "16 runs: 2 seeds, 24 s windows" in text
    assert "![the atlas: sync-excess and placement gain per cell](atlas.png)" in text  # beside the page
    assert (tmp_path / "docs" / "atlas.png").read_bytes()[:4] == b"\x89PNG"
    assert "**v1**:" in text and "unlimited: [host]" in text
    cells = {r["name"]: r for r in at.cells(out)}
    assert set(cells) == keep
    for name in ("v1__none__bursty",):
        r = cells[name]
        for key in ("se_fixed", "se_wa", "gain_overlap", "gain_sim", "gain_wa"):
            assert len(r[key]) in (3, 4) and r[key][0] == r[key][0], (name, key)  # a mean (not NaN)
        assert r["merges_wa"] >= 1 and r["steps_wa"] > 0
    table = [ln for ln in text.splitlines() if ln.startswith("| v1 |")]
    assert len(table) == 1  # the cell; the control is in the paragraph


@pytest.mark.parametrize(
    "name,parts",
    [
        ("v1__none__bursty", ("v1", "none", "bursty", "")),
        ("shared__none__bursty__unl-gpu", ("shared", "none", "bursty", "gpu")),
        ("bursty", None),
        ("a__b__c__d", None),
    ],
)
def test_regime_names_parse(name, parts):
    got = at.parse_regime(name)
    assert (got and tuple(got.values())) == parts if parts else got is None


def test_disaggregated_paragraph_quotes_the_kv_hand_offs():
    """A design whose runs report KV hand-offs (disagg:) says how long they took with and without
    merges, in the controls' cell and under each control."""

    def rec(unl, kv, se):
        return {"name": "x", "design": "disagg", "mitigation": "none", "regime": "bursty", "unlimited": unl}, {
            "se_fixed": (se, se, se), "se_wa": (se, se, se), "kv_s": kv}  # fmt: skip

    recs = [{**a, **b} for a, b in (rec("", {"no_sync": 0.0300, "fixed": 0.0312}, 0.001),
                                      rec("nic", {"no_sync": 0.0004, "fixed": 0.0004}, 0.0))]  # fmt: skip
    text = at.paragraphs(recs)[0]
    assert "KV hand-offs in none / bursty: 30.0 ms without merges, 31.2 ms with fixed's" in text
    assert "`unlimited: [nic]` 0.4 ms without merges, 0.4 ms with fixed's." in text
    assert "Deciding resource: **nic**" in text
