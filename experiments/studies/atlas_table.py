"""The mechanism atlas: when is a merge safe, up to which load, and which resource decides it.

    wadiloco sweep experiments/atlas.yaml --out DIR --workers 2 --no-figures
    python -m wadiloco.experiments.studies.atlas_table DIR [--capacity] [--doc docs/atlas.md] [--figure PATH]

DIR is the sweep's output folder. Its regimes are named `DESIGN__MITIGATION__REGIME` (a cell, at its
regime's own load), `...__load-L` (the same cell at load L, a fraction of a sidecar's capacity: the
load axis) and `...__unl-RESOURCE` after either (the cell with `fleet.unlimited: [RESOURCE]`: a
control that shows whether that resource carries the interference). Per cell the table gives, from
the sweep's summary.csv and runs.csv:
- sync-excess of `fixed` and of `wa_diloco` (SLO-violation points over no_sync on the same seed)
  with the protocol's bootstrap CI over seeds;
- the deciding resource: of the cell's controls, the one that moves fixed's sync-excess the most
  towards none, with the share of the effect it removes (`decide`); a cell whose interval holds 0
  has no effect to explain;
- placement gain: per seed, the sync-excess of each oracle spending wa_diloco's budget (`overlap_oracle`,
  which minimises the arrivals a merge overlaps, and `sim_oracle`, which simulates placements on the
  seed) and of `wa_diloco`, minus the mean over that seed's `matched_random[wa_diloco]` draws
  (negative: better placed than random at the same merge budget), mean and bootstrap CI (or why
  there is none: all zero, no variance across seeds);
- training progress: wa_diloco's final loss and inner steps (a no-barrier mitigation takes more);
- capacity cost at 90% SLO attainment: 1 - wa_diloco's largest load over no_sync's, from
  `--capacity` (a bisection per seed, experiments.capacity; written to DIR/atlas_capacity.json and
  read back from there), for the cells of the regime `CAPACITY["regime"]` (bursty).
A second table gives fixed's sync-excess of every cell at each load with its deciding resource, and
each design's paragraph says where merges stop being safe (`UNSAFE_PP`). `--doc` replaces the text
between `<!-- atlas:start -->` and `<!-- atlas:end -->` in that page with the section "When is a
merge safe?": the heatmaps (experiments/studies/atlas_figures.py; PNGs beside the page, or
`--figure`), one paragraph per design and the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wadiloco.experiments.output import read_table
from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import check_input, json_text, read_text

START = "<!-- atlas:start -->"
END = "<!-- atlas:end -->"
SEP = "__"
UNL = "unl-"
LOAD = "load-"
WA, FIXED, MR = "wa_diloco", "fixed", "matched_random[wa_diloco]"
ORACLES = {"gain_overlap": "overlap_oracle", "gain_sim": "sim_oracle"}  # record key -> label
CAPACITY_FILE = "atlas_capacity.json"
RUNS_COLUMNS = ("regime", "policy", "status", "seed", "sync_excess", "merges", "final_loss", "inner_steps")
SUMMARY_COLUMNS = ("regime", "policy", "policy_name", "sync_excess_mean", "sync_excess_ci_low", "sync_excess_ci_high")
# a coarse search per cell of one regime (bursty: a workload with a load to scale)
CAPACITY = {"regime": "bursty", "attainment": 0.9, "lo": 0.1, "hi": 1.3, "tol": 0.05, "seeds": 2}
UNSAFE_PP = 0.5  # a merge is unsafe where fixed's sync-excess is above this many points and its CI above 0
DESIGNS = {  # what each design is, for the paragraphs
    "v1": "a dedicated serving GPU and a vLLM V1 engine, whose host work overlaps the GPU step",
    "v0": "a dedicated serving GPU and a vLLM V0 engine, whose host work runs in series with the GPU step",
    "shared": "serving and the outer step on the same GPU, `fleet.colocation: same_gpu`",
    "shared_ts": "the shared GPU complete, `fleet.gpu_sharing: timeslice`: inner steps hold the serving GPU between "
    "barriers (at load 0.2: a time-sliced sidecar keeps about 43% of its GPU)",
    "testbed": "the paper's testbed twin: a GPU co-tenant in the 8 s after each merge, no DiLoCo traffic",
    "disagg": "disaggregated prefill/decode, `disagg:` (host 0 of each island prefills, host 1 decodes): each "
    "request's KV, 128 KiB per prompt token, crosses the island's NICs and switch that the all-reduce and "
    "checkpoint writes use (2 islands x 2 hosts, at load 0.3)",
}


def parse_regime(name: str) -> dict[str, str] | None:
    """`DESIGN__MITIGATION__REGIME[__load-L][__unl-RESOURCE]` as its parts (`load`: L as written, or "");
    None for any other name."""
    parts = name.split(SEP)
    if len(parts) < 3:
        return None
    rest = parts[3:]
    load = rest.pop(0)[len(LOAD) :] if rest and rest[0].startswith(LOAD) else ""
    unl = rest.pop(0)[len(UNL) :] if rest and rest[0].startswith(UNL) else ""
    if rest:
        return None
    return {"design": parts[0], "mitigation": parts[1], "regime": parts[2], "load": load, "unlimited": unl}


def _tables(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, summary): the sweep's runs.csv and summary.csv, or, where the sweep wrote no report
    (experiments.sweep.execute_plan alone), the protocol's tables computed from its store."""
    if all((out / f).exists() or (out / f).is_symlink() for f in ("runs.csv", "summary.csv")):
        runs = read_table(out / "runs.csv", RUNS_COLUMNS, "sweep's runs.csv")
        return runs, read_table(out / "summary.csv", SUMMARY_COLUMNS, "sweep's summary.csv")
    from wadiloco.experiments.protocol import analyse, runs_table
    from wadiloco.experiments.store import Store
    from wadiloco.experiments.sweep.plan import Plan

    if not (out / "runs.sqlite").is_file():
        raise InputError(out, "", f"no sweep output; run `wadiloco sweep experiments/atlas.yaml --out {out}` first")
    store = Store(out / "runs.sqlite", readonly=True)
    try:
        plan, rows = Plan.from_store(store), list(store.rows())
    finally:
        store.close()
    runs = runs_table(plan, rows)
    return runs, analyse(plan, runs)["summary"]


def _ci(x) -> tuple[float, float, float, str]:
    from wadiloco.experiments.stats import bootstrap_mean_ci
    from wadiloco.models.rng import stream

    ci = bootstrap_mean_ci(x, n_resamples=4999, rng=stream(0, "atlas"))
    return ci.mean, ci.low, ci.high, ci.note


def _gain(runs: pd.DataFrame, regime: str, policy: str) -> tuple:
    """Per seed: the policy's sync-excess minus the mean of the matched-random draws; mean and CI."""
    r = runs[(runs["regime"] == regime) & (runs["status"] == "ok")]
    pol = r[r["policy"] == policy].groupby("seed")["sync_excess"].mean()
    ctl = r[r["policy"] == MR].groupby("seed")["sync_excess"].mean()
    d = (pol - ctl).dropna()
    return _ci(d.to_numpy()) if len(d) else (math.nan,) * 3


def _se(summary: pd.DataFrame, regime: str, policy: str) -> tuple:
    """The protocol's sync-excess of `policy` (a label; for `fixed`, any fixed cadence: the testbed
    cell's is H=512, labelled fixed_tb), with the note that replaces a missing interval."""
    col = "policy_name" if policy == FIXED else "policy"
    row = summary[(summary["regime"] == regime) & (summary[col] == policy)]
    if row.empty:
        return (math.nan,) * 3
    r = row.iloc[0]
    note = r.get("sync_excess_note", "")
    note = note if isinstance(note, str) else ""
    return float(r["sync_excess_mean"]), float(r["sync_excess_ci_low"]), float(r["sync_excess_ci_high"]), note


def kv_times(out: Path) -> dict[tuple[str, str], float]:
    """Disaggregated cells' mean KV hand-off time (summary `disagg.kv_transfer_mean_s`, sim.disagg) per
    (regime, policy label), averaged over seeds and draws; empty without such runs or a store."""
    from wadiloco.experiments.store import Store

    if not (out / "runs.sqlite").is_file():
        return {}
    store = Store(out / "runs.sqlite", readonly=True)
    try:
        acc: dict[tuple[str, str], list[float]] = {}
        for r in store.rows():
            d = (r["summary"] or {}).get("disagg") if r["status"] == "ok" else None
            if d:
                acc.setdefault((r["regime"], r["policy_label"]), []).append(float(d["kv_transfer_mean_s"]))
    finally:
        store.close()
    return {k: float(np.mean(v)) for k, v in acc.items()}


def cells(out_dir: str | Path) -> list[dict[str, Any]]:
    """One record per regime of the sweep that names a cell, a cell at another load, or a control;
    each cell (not a control) with its deciding resource (`decide`) among its own controls."""
    out = Path(out_dir)
    runs, summary = _tables(out)
    cap, kv, loads = read_capacity(out), kv_times(out), plan_loads(out)
    recs = []
    for regime in dict.fromkeys(summary["regime"]):
        parts = parse_regime(regime)
        if parts is None:
            continue
        ok = runs[(runs["regime"] == regime) & (runs["status"] == "ok")]
        wa = ok[ok["policy"] == WA]
        rec = {"name": regime, **parts, "at": loads.get(regime, float(parts["load"]) if parts["load"] else None)}
        rec["se_fixed"] = _se(summary, regime, FIXED)
        rec["se_wa"] = _se(summary, regime, WA)
        rec.update({key: _gain(runs, regime, label) for key, label in ORACLES.items()})
        rec["gain_wa"] = _gain(runs, regime, WA)
        rec["merges_wa"] = float(wa["merges"].mean()) if len(wa) else math.nan
        rec["loss_wa"] = float(wa["final_loss"].mean()) if len(wa) else math.nan
        rec["steps_wa"] = float(wa["inner_steps"].mean()) if len(wa) else math.nan
        rec["capacity_cost"] = cap.get(regime)
        rec["kv_s"] = {p: kv[(regime, p)] for p in ("no_sync", FIXED) if (regime, p) in kv}
        recs.append(rec)
    for rec in recs:
        if not rec["unlimited"]:
            rec["decision"] = decide(rec, controls_of(recs, rec))
    return recs


def plan_loads(out: Path) -> dict[str, float]:
    """Each regime's workload.load as the sweep's plan recorded it (experiments.sweep.plan.Regime)."""
    from wadiloco.experiments.store import Store

    if not (out / "runs.sqlite").is_file():
        return {}
    store = Store(out / "runs.sqlite", readonly=True)
    try:
        plan = store.plan()
    finally:
        store.close()
    return {r["name"]: float(r["load"]) for r in plan["regimes"] if r.get("load") is not None}


def controls_of(recs: list[dict[str, Any]], cell: dict[str, Any]) -> list[dict[str, Any]]:
    """The controls of a cell: the same design, mitigation, regime and load with one resource unlimited."""
    key = ("design", "mitigation", "regime", "load")
    return [r for r in recs if r["unlimited"] and all(r[k] == cell[k] for k in key)]


def decide(cell: dict[str, Any], controls: list[dict[str, Any]]) -> dict[str, Any]:
    """Which resource carries the cell's merge effect: of its controls, the one that moves fixed's
    sync-excess the most towards none, with the share of the effect that goes (`share`, 1: all of
    it). A cell without an effect (all zero, or an interval holding 0) has nothing to decide; a
    share under a half names no single resource."""
    m, lo, hi = cell["se_fixed"][:3]
    if not controls:
        return {"resource": None, "share": math.nan, "text": "no control ran"}
    if not math.isfinite(m):
        return {"resource": None, "share": math.nan, "text": "n/a"}
    if m == 0 or (math.isfinite(lo) and math.isfinite(hi) and lo <= 0 <= hi):
        return {"resource": "", "share": math.nan, "text": "no effect"}
    ok = [r for r in controls if math.isfinite(r["se_fixed"][0])]
    if not ok:
        return {"resource": None, "share": math.nan, "text": "n/a"}
    best = max(ok, key=lambda r: abs(m - r["se_fixed"][0]))
    share = (m - best["se_fixed"][0]) / m
    if share < 0.5:
        return {"resource": "", "share": share, "text": f"no single resource ({best['unlimited']} {share:.0%})"}
    return {"resource": best["unlimited"], "share": share, "text": f"{best['unlimited']} ({share:.0%})"}


def read_capacity(out: Path) -> dict[str, Any]:
    p = out / CAPACITY_FILE
    if not p.exists() and not p.is_symlink():
        return {}
    doc = json_text(read_text(p, "capacity file"), p)
    if not isinstance(doc, dict):
        raise InputError(
            p, "", "not the capacity file `--capacity` writes (a JSON mapping); remove it or run --capacity"
        )
    return doc


def run_capacity(out_dir: str | Path, workers: int = 2) -> dict[str, Any]:
    """wa_diloco's capacity cost at 90% attainment for every cell of atlas.yaml's capacity regime
    (experiments.capacity: bisection over workload.load per seed, no_sync alongside)."""
    from wadiloco.experiments.capacity import SearchSpec, capacity
    from wadiloco.experiments.store import Store
    from wadiloco.experiments.sweep.plan import load_sweep

    out = Path(out_dir)
    store = Store(out / "runs.sqlite", readonly=True)
    try:
        sweep_file = store.plan()["file"]
    finally:
        store.close()
    which = CAPACITY["regime"]
    plan = load_sweep(sweep_file)
    c = CAPACITY
    spec = SearchSpec(attainment=c["attainment"], lo=c["lo"], hi=c["hi"], tol=c["tol"])
    res: dict[str, Any] = {}
    for reg in plan.regimes:
        parts = parse_regime(reg.name)
        if parts is None or parts["unlimited"] or parts["load"] or parts["regime"] != which:
            continue
        if "load" not in reg.scenario.workload:
            continue
        r = capacity(reg.scenario, WA, seeds=c["seeds"], spec=spec, workers=workers)
        res[reg.name] = [r["capacity_cost_fraction"], r["capacity_cost_ci_low"], r["capacity_cost_ci_high"]]
    from wadiloco.experiments.output import write_atomic

    write_atomic(out / CAPACITY_FILE, json.dumps(res, indent=1, sort_keys=True) + "\n")
    return res


def _pp(t, digits: int = 2) -> str:
    """A (mean, low, high[, note]) of fractions as percentage points with its CI, or why it has none."""
    if t is None or not math.isfinite(t[0]):
        return "n/a"
    m, lo, hi = (100 * float(x) for x in t[:3])
    note = t[3] if len(t) > 3 and t[3] else ""
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{m:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"
    return f"{m:+.{digits}f}" + (f" ({note})" if note else "")


def _num(x, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if x is not None and math.isfinite(x) else "n/a"


def _cells(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells at their regime's own load (no control, no other load)."""
    return [r for r in recs if not r["unlimited"] and not r["load"]]


def table(recs: list[dict[str, Any]]) -> list[str]:
    head = [
        "design",
        "mitigation",
        "regime",
        "load",
        "sync-excess fixed, pp [CI]",
        "deciding resource (share of fixed's effect it removes)",
        "sync-excess wa_diloco, pp [CI]",
        "gain overlap_oracle - MR, pp [CI]",
        "gain sim_oracle - MR, pp [CI]",
        "gain wa_diloco - MR, pp [CI]",
        "wa merges",
        "wa final loss",
        "wa inner steps",
        "capacity cost @90% attainment, % [CI]",
    ]
    rows = []
    for r in _cells(recs):
        cap = r["capacity_cost"]
        rows.append(
            [r["design"], r["mitigation"], r["regime"], _load(r["at"]), _pp(r["se_fixed"]), r["decision"]["text"]]
            + [_pp(r["se_wa"]), _pp(r["gain_overlap"]), _pp(r["gain_sim"]), _pp(r["gain_wa"])]
            + [_num(r["merges_wa"], 1), _num(r["loss_wa"], 4), _num(r["steps_wa"], 0)]
            + [_pp(cap, 1) if cap else "not searched"]
        )
    return _md(head, rows)


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(x) + " |" for x in rows]


def _load(x) -> str:
    return f"{x:g}" if x is not None and math.isfinite(x) else "n/a"


def by_load(recs: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Each cell's records at every load it ran at (its own and the load axis'), by ascending load."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in recs:
        if not r["unlimited"]:
            out.setdefault((r["design"], r["mitigation"], r["regime"]), []).append(r)
    for k in out:
        out[k].sort(key=lambda r: r["at"] if r["at"] is not None else math.inf)
    return out


def load_table(recs: list[dict[str, Any]]) -> list[str]:
    """fixed's sync-excess of every cell at each load, with the deciding resource where it ran."""
    groups = {k: v for k, v in by_load(recs).items() if len(v) > 1}
    if not groups:
        return []
    n = max(len(v) for v in groups.values())
    head = ["design", "mitigation", "regime"] + [f"load {i + 1}: fixed's sync-excess, pp [CI]" for i in range(n)]
    rows = []
    for (d, m, reg), rs in groups.items():
        cells_ = [f"{_load(r['at'])}: {_pp(r['se_fixed'])}" + _decided(r["decision"]) for r in rs]
        rows.append([d, m, reg] + cells_ + [""] * (n - len(rs)))
    return _md(head, rows)


def _decided(d: dict[str, Any]) -> str:
    return f" · {d['text']}" if d["resource"] is not None and d["text"] != "no effect" else ""


def unsafe(r: dict[str, Any]) -> bool:
    """fixed's merges cost more than UNSAFE_PP points, and the interval says they cost something."""
    m, lo = r["se_fixed"][0], r["se_fixed"][1]
    return math.isfinite(m) and 100 * m > UNSAFE_PP and (not math.isfinite(lo) or lo > 0)


def safe_up_to(recs: list[dict[str, Any]], design: str) -> str:
    """Per regime of the design's unmitigated cells: the loads where merges stay safe and the first
    where they stop, with fixed's sync-excess and its deciding resource there."""
    parts = []
    for (d, m, reg), rs in by_load(recs).items():
        if d != design or m != "none" or len(rs) < 2:
            continue
        bad = next((r for r in rs if unsafe(r)), None)
        if bad is None:
            parts.append(f"{reg} safe at every load run (to {_load(rs[-1]['at'])})")
            continue
        ok = [r for r in rs if r["at"] is not None and bad["at"] is not None and r["at"] < bad["at"]]
        where = f"safe to {_load(ok[-1]['at'])}, " if ok else ""
        why = f"; {bad['decision']['text']}" if bad["decision"]["resource"] is not None else ""
        parts.append(f"{reg} {where}unsafe from {_load(bad['at'])} ({_pp(bad['se_fixed'])} pp{why})")
    if not parts:
        return ""
    return f" Where merges stop being safe (fixed, no mitigation, above {UNSAFE_PP:g} pp): " + "; ".join(parts) + "."


def deciding(recs: list[dict[str, Any]], design: str) -> dict[str, Any] | None:
    """The design's controls in the cell they have long been quoted for (mitigation none, bursty, its own
    load): which `fleet.unlimited` resource moves fixed's sync-excess the most (towards no effect, of
    either sign)."""
    base = next((r for r in _cells(recs) if r["design"] == design and r["mitigation"] == "none"
                 and r["regime"] in ("bursty", "stage12")), None)  # fmt: skip
    ctl = controls_of(recs, base) if base is not None else []
    if base is None or not ctl or not math.isfinite(base["se_fixed"][0]):
        return None
    b0 = base["se_fixed"][0]
    best = max(ctl, key=lambda r: abs(b0 - r["se_fixed"][0]) if math.isfinite(r["se_fixed"][0]) else -math.inf)
    return {"base": base, "controls": ctl, "resource": best["unlimited"], "best": best}


def paragraphs(recs: list[dict[str, Any]]) -> list[str]:
    out = []
    for design in dict.fromkeys(r["design"] for r in recs):
        d = deciding(recs, design)
        mine = [r for r in _cells(recs) if r["design"] == design]
        worst = max(mine, key=lambda r: abs(r["se_fixed"][0]) if math.isfinite(r["se_fixed"][0]) else -math.inf)
        text = (
            f"**{design}**: {DESIGNS.get(design, design)}. Largest effect: {worst['mitigation']} / {worst['regime']}, "
        )
        text += f"fixed's sync-excess {_pp(worst['se_fixed'])} pp. "
        if d is None:
            text += "No unlimited-resource control ran for this design."
        else:
            b, best = d["base"], d["best"]
            ctl = "; ".join(f"`unlimited: [{r['unlimited']}]` {_pp(r['se_fixed'])} pp" for r in d["controls"])
            moved = b["se_fixed"][0] - best["se_fixed"][0]
            base = _pp(b["se_fixed"])
            if abs(moved) < 1e-4:
                text += f"In {b['regime']} ({ctl}, against {base} pp) no resource carries it: merges are safe there."
            else:
                text += f"Deciding resource: **{d['resource']}**. In {b['regime']}, fixed's {base} pp becomes {ctl}."
        text += _per_cell(mine) + safe_up_to(recs, design)
        out.append(text + _kv_note(recs, design) + _by_mitigation(mine))
    return out


def _per_cell(mine: list[dict[str, Any]]) -> str:
    """How the design's cells with an effect divide among deciding resources."""
    decided = [r["decision"] for r in mine if r.get("decision", {}).get("resource") is not None]
    if len(decided) < 2:
        return ""
    from collections import Counter

    counts = Counter(d["resource"] or ("none" if d["text"] == "no effect" else "no single") for d in decided)
    names = {"none": "no effect", "no single": "no single resource"}
    return " Per cell (its own controls): " + ", ".join(f"{names.get(k, k)} {n}" for k, n in counts.most_common()) + "."


def _kv_note(recs: list[dict[str, Any]], design: str) -> str:
    """For a disaggregated design: the mean KV hand-off time without merges and with fixed's, in the
    unmitigated bursty cell (or the first cell that has them) and under each of its controls."""
    mine = [r for r in _cells(recs) if r["design"] == design and r.get("kv_s")]
    base = next((r for r in mine if r["mitigation"] == "none" and r["regime"] == "bursty"), mine[0] if mine else None)
    if base is None:
        return ""
    ctl = [r for r in controls_of(recs, base) if r.get("kv_s")]

    def ms(r: dict[str, Any]) -> str:
        quiet, busy = (1e3 * r["kv_s"].get(p, math.nan) for p in ("no_sync", FIXED))
        return f"{quiet:.1f} ms without merges, {busy:.1f} ms with fixed's"

    text = f" KV hand-offs in {base['mitigation']} / {base['regime']}: {ms(base)}"
    text += "".join(f"; `unlimited: [{r['unlimited']}]` {ms(r)}" for r in ctl)
    return text + "."


def _by_mitigation(mine: list[dict[str, Any]]) -> str:
    """fixed's and wa_diloco's sync-excess per mitigation, each the mean over the design's regimes."""
    parts, counts = [], []
    for m in dict.fromkeys(r["mitigation"] for r in mine):
        rs = [r for r in mine if r["mitigation"] == m]
        f = [r["se_fixed"][0] for r in rs if math.isfinite(r["se_fixed"][0])]
        w = [r["se_wa"][0] for r in rs if math.isfinite(r["se_wa"][0])]
        if f or w:
            fs = f"{100 * np.mean(f):+.2f}" if f else "n/a"
            ws = f"{100 * np.mean(w):+.2f}" if w else "n/a"
            parts.append(f"{m} {fs} / {ws}")
            counts.append(len({r["regime"] for r in rs}))
    if len(parts) < 2:
        return ""
    over = f"{counts[0]} regime(s)"
    if len(set(counts)) > 1:  # a design that runs some mitigations in fewer regimes: say how many each
        parts, over = [f"{p} ({n})" for p, n in zip(parts, counts)], "(n) regimes"
    return f" Sync-excess by mitigation (fixed / wa_diloco, pp, mean over {over}): " + "; ".join(parts) + "."


INTRO = (
    "Each cell is a co-location design x a training-side mitigation x a workload regime, run with the "
    "calibration protocol ({runs} runs: {seeds} seeds, {horizon}) at the regime's own load, and with fixed-interval "
    "merges only at more loads (the load axis: a fraction of a sidecar's capacity, 1 = saturation). "
    "Sync-excess is a run's SLO-violation rate minus the no_sync run's on the same seed, in percentage points; "
    "placement gain is a policy's sync-excess minus the "
    "mean of `matched_random[wa_diloco]` on the same seed (negative: placed better than random at the same merge "
    "budget), for two oracles spending wa_diloco's budget, `overlap_oracle` (minimises the request arrivals a merge "
    "overlaps: a proxy) and `sim_oracle` (simulates candidate placements on the seed and keeps the one with the "
    "fewest violations: a local search, exact on its own seed, that can profit from luck), and for wa_diloco; a "
    "cell whose values do not vary says so (all zero, no variance across seeds) instead of an interval, and the "
    "heatmaps hatch every cell whose interval holds 0. A cell's deciding resource is the one whose `fleet.unlimited` "
    "control (the same cell with that resource unlimited: every cell at its own load, the unmitigated cells at "
    "every load) moves fixed's sync-excess the most towards none, with the share of the effect it removes "
    "(negative sync-excess: merges free a resource serving needed); a cell whose interval holds 0 has no effect "
    "to decide. A merge is unsafe where fixed's sync-excess is above {unsafe} pp with its interval above 0. "
    "Capacity cost: 1 - wa_diloco's largest "
    "load at 90% SLO attainment over no_sync's (bisection to 0.05 of a sidecar's capacity, 2 seeds, bursty cells "
    "only; the interval holds the bisection's bracket). Regenerate: "
    "`wadiloco sweep experiments/atlas.yaml --out DIR --workers 2 --no-figures` (the report without its "
    "figures, a timeline per regime), then "
    "`python -m wadiloco.experiments.studies.atlas_table DIR --capacity --doc docs/atlas.md`."
)


def facts(out_dir: str | Path) -> dict[str, Any]:
    """What the section says about the sweep: runs, seeds and horizon, from its store."""
    from wadiloco.experiments.store import Store

    store = Store(Path(out_dir) / "runs.sqlite", readonly=True)
    try:
        plan, n = store.plan(), store.counts()
    finally:
        store.close()
    hs = sorted({r.get("horizon_s") for r in plan["regimes"] if r.get("horizon_s")})
    horizon = ", ".join(f"{h:g}" for h in hs) + " s windows" if hs else "each scenario's window"
    return {"runs": sum(n.values()), "seeds": len(plan["seeds"]), "horizon": horizon, "unsafe": f"{UNSAFE_PP:g}"}


def render(
    recs: list[dict[str, Any]], figure: str | None, meta: dict[str, Any] | None = None, loads_figure: str | None = None
) -> str:
    lines = ["## When is a merge safe?", ""]
    if meta:
        lines += [INTRO.format(**meta), ""]
    if figure:
        lines += [f"![the atlas: sync-excess and placement gain per cell]({figure})", ""]
    lines += [p + "\n" for p in paragraphs(recs)]
    lines += table(recs) + [""]
    loads = load_table(recs)
    if loads:
        lines += ["### By load", ""]
        lines += ["fixed's sync-excess of each cell at every load it ran at (ascending), pp [CI], and after `·` "
                  "the deciding resource where the cell's controls ran and it has an effect.", ""]  # fmt: skip
        if loads_figure:
            lines += [f"![the atlas by load: fixed's sync-excess per cell and load]({loads_figure})", ""]
        lines += loads + [""]
    return "\n".join(lines)


def update_page(path: str | Path, text: str) -> None:
    from wadiloco.experiments.output import replace_section

    replace_section(path, START, END, text)


def main(argv: list[str] | None = None) -> int:
    from wadiloco.experiments.cli import one_error_path

    ap = argparse.ArgumentParser(
        prog="python -m wadiloco.experiments.studies.atlas_table", description=__doc__.split("\n")[0]
    )
    ap.add_argument("out_dir", help="the output folder of `wadiloco sweep experiments/atlas.yaml`")
    ap.add_argument("--doc", help="replace the text between the atlas markers in this Markdown page")
    ap.add_argument("--figure", help="where the heatmap goes (default with --doc: atlas.png beside the page)")
    ap.add_argument("--capacity", action="store_true", help="run the capacity searches first (DIR/atlas_capacity.json)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes for --capacity")
    ap.add_argument("--json", action="store_true", help="print the cells as JSON instead of Markdown")
    args = ap.parse_args(argv)
    return one_error_path(lambda: _main(args))


def _main(args) -> int:
    if args.doc:  # the page is checked before any work (a FIFO, a device, a folder: refused now, nothing made)
        check_input(args.doc, args.doc, "--doc", "Markdown page")
    if args.capacity:
        run_capacity(args.out_dir, args.workers)
    recs = cells(args.out_dir)
    fig = Path(args.figure) if args.figure else (Path(args.doc).parent / "atlas.png" if args.doc else None)
    links = [None, None]
    if fig is not None:
        links = _figures(recs, fig, Path(args.doc).resolve().parent if args.doc else Path.cwd())
    text = render(recs, links[0], facts(args.out_dir), links[1])
    if args.doc:
        update_page(args.doc, text)
    sys.stdout.write(json.dumps(recs, indent=1, default=float) + "\n" if args.json else text + "\n")
    return 0


def _figures(recs: list[dict[str, Any]], fig: Path, base: Path) -> list[str | None]:
    """The heatmaps (the load axis' beside the first, `<stem>_loads.png`), as links from `base`."""
    from wadiloco.experiments.studies.atlas_figures import heatmap, load_heatmap

    heatmap(_cells(recs), fig)
    out: list[str | None] = [Path(*_rel(fig.resolve(), base)).as_posix(), None]
    groups = {k: v for k, v in by_load(recs).items() if len(v) > 1}
    if groups:
        loads = fig.with_name(f"{fig.stem}_loads{fig.suffix}")
        load_heatmap(groups, loads)
        out[1] = Path(*_rel(loads.resolve(), base)).as_posix()
    return out


def _rel(target: Path, base: Path) -> tuple[str, ...]:
    """target's path relative to base, with `..` where needed (a page links its figure)."""
    import os

    return tuple(Path(os.path.relpath(target, base)).parts)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
