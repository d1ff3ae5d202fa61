"""The mechanism atlas: when is a merge safe, and which resource decides it.

    wadiloco sweep experiments/atlas.yaml --out DIR --workers 2
    python -m wadiloco.experiments.studies.atlas_table DIR [--capacity] [--doc docs/atlas.md] [--figure PATH]

DIR is the sweep's output folder. Its regimes are named `DESIGN__MITIGATION__REGIME` (a cell), and
`DESIGN__none__REGIME__unl-RESOURCE` (the same cell with `fleet.unlimited: [RESOURCE]`: the control
that shows which resource carries the interference). Per cell the table gives, from the sweep's
summary.csv and runs.csv:
- sync-excess of `fixed` and of `wa_diloco` (SLO-violation points over no_sync on the same seed)
  with the protocol's bootstrap CI over seeds;
- placement gain: per seed, the sync-excess of each oracle spending wa_diloco's budget (`overlap_oracle`,
  which minimises the arrivals a merge overlaps, and `sim_oracle`, which simulates placements on the
  seed) and of `wa_diloco`, minus the mean over that seed's `matched_random[wa_diloco]` draws
  (negative: better placed than random at the same merge budget), mean and bootstrap CI (or why
  there is none: all zero, no variance across seeds);
- training progress: wa_diloco's final loss and inner steps (a no-barrier mitigation takes more);
- capacity cost at 90% SLO attainment: 1 - wa_diloco's largest load over no_sync's, from
  `--capacity` (a bisection per seed, experiments.capacity; written to DIR/atlas_capacity.json and
  read back from there), for the cells of the regime `CAPACITY["regime"]` (bursty).
`--doc` replaces the text between `<!-- atlas:start -->` and `<!-- atlas:end -->` in that page with
the section "When is a merge safe?": the heatmap (seaborn; a PNG beside the page, or `--figure`), one
paragraph per design naming the deciding resource with its unlimited-resource control, and the table.
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
WA, FIXED, MR = "wa_diloco", "fixed", "matched_random[wa_diloco]"
ORACLES = {"gain_overlap": "overlap_oracle", "gain_sim": "sim_oracle"}  # record key -> label
CAPACITY_FILE = "atlas_capacity.json"
RUNS_COLUMNS = ("regime", "policy", "status", "seed", "sync_excess", "merges", "final_loss", "inner_steps")
SUMMARY_COLUMNS = ("regime", "policy", "policy_name", "sync_excess_mean", "sync_excess_ci_low", "sync_excess_ci_high")
# a coarse search per cell of one regime (bursty: a workload with a load to scale)
CAPACITY = {"regime": "bursty", "attainment": 0.9, "lo": 0.1, "hi": 1.3, "tol": 0.05, "seeds": 2}
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
    """`DESIGN__MITIGATION__REGIME[__unl-RESOURCE]` as its parts; None for any other name."""
    parts = name.split(SEP)
    if len(parts) not in (3, 4) or (len(parts) == 4 and not parts[3].startswith(UNL)):
        return None
    return {
        "design": parts[0],
        "mitigation": parts[1],
        "regime": parts[2],
        "unlimited": parts[3][len(UNL) :] if len(parts) == 4 else "",
    }


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
    """One record per regime of the sweep that names a cell or a control."""
    out = Path(out_dir)
    runs, summary = _tables(out)
    cap = read_capacity(out)
    kv = kv_times(out)
    recs = []
    for regime in dict.fromkeys(summary["regime"]):
        parts = parse_regime(regime)
        if parts is None:
            continue
        ok = runs[(runs["regime"] == regime) & (runs["status"] == "ok")]
        wa = ok[ok["policy"] == WA]
        rec = {"name": regime, **parts}
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
    return recs


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
        if parts is None or parts["unlimited"] or parts["regime"] != which or "load" not in reg.scenario.workload:
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


def table(recs: list[dict[str, Any]]) -> list[str]:
    head = [
        "design",
        "mitigation",
        "regime",
        "sync-excess fixed, pp [CI]",
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
    for r in recs:
        if r["unlimited"]:
            continue
        cap = r["capacity_cost"]
        rows.append(
            [r["design"], r["mitigation"], r["regime"], _pp(r["se_fixed"]), _pp(r["se_wa"])]
            + [_pp(r["gain_overlap"]), _pp(r["gain_sim"]), _pp(r["gain_wa"]), _num(r["merges_wa"], 1)]
            + [_num(r["loss_wa"], 4)]
            + [_num(r["steps_wa"], 0), _pp(cap, 1) if cap else "not searched"]
        )
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(x) + " |" for x in rows]


def deciding(recs: list[dict[str, Any]], design: str) -> dict[str, Any] | None:
    """The design's controls: which `fleet.unlimited` resource moves fixed's sync-excess the most (towards
    no effect, of either sign) in the cell the controls copy (mitigation none, the controls' regime)."""
    ctl = [r for r in recs if r["design"] == design and r["unlimited"]]
    if not ctl:
        return None
    base = next((r for r in recs if r["design"] == design and not r["unlimited"]
                 and r["mitigation"] == ctl[0]["mitigation"] and r["regime"] == ctl[0]["regime"]), None)  # fmt: skip
    if base is None or not math.isfinite(base["se_fixed"][0]):
        return None
    b0 = base["se_fixed"][0]
    best = max(ctl, key=lambda r: abs(b0 - r["se_fixed"][0]) if math.isfinite(r["se_fixed"][0]) else -math.inf)
    return {"base": base, "controls": ctl, "resource": best["unlimited"], "best": best}


def paragraphs(recs: list[dict[str, Any]]) -> list[str]:
    out = []
    for design in dict.fromkeys(r["design"] for r in recs):
        d = deciding(recs, design)
        mine = [r for r in recs if r["design"] == design and not r["unlimited"]]
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
        out.append(text + _kv_note(recs, design) + _by_mitigation(mine))
    return out


def _kv_note(recs: list[dict[str, Any]], design: str) -> str:
    """For a disaggregated design: the mean KV hand-off time without merges and with fixed's, in the
    cell its controls copy and in each control (what the network does to it)."""
    ctl = [r for r in recs if r["design"] == design and r["unlimited"] and r.get("kv_s")]
    base = [r for r in recs if r["design"] == design and not r["unlimited"] and r.get("kv_s")]
    if ctl:
        base = [r for r in base if r["mitigation"] == ctl[0]["mitigation"] and r["regime"] == ctl[0]["regime"]]
    if not base:
        return ""

    def ms(r: dict[str, Any]) -> str:
        quiet, busy = (1e3 * r["kv_s"].get(p, math.nan) for p in ("no_sync", FIXED))
        return f"{quiet:.1f} ms without merges, {busy:.1f} ms with fixed's"

    b = base[0]
    text = f" KV hand-offs in {b['mitigation']} / {b['regime']}: {ms(b)}"
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


def heatmap(recs: list[dict[str, Any]], path: str | Path) -> None:
    """Two panels, rows design/mitigation, columns regime: fixed's sync-excess, and wa_diloco's
    placement gain over matched random."""
    import seaborn as sns
    from matplotlib.figure import Figure

    from wadiloco.experiments.figures import png_bytes, style
    from wadiloco.experiments.output import write_atomic

    cellrecs = [r for r in recs if not r["unlimited"]]
    regimes = list(dict.fromkeys(r["regime"] for r in cellrecs))
    rows = list(dict.fromkeys(f"{r['design']} / {r['mitigation']}" for r in cellrecs))
    panels = (("se_fixed", "fixed: sync-excess (pp)"), ("gain_wa", "wa_diloco - matched random (pp)"))
    with style():
        fig = Figure(figsize=(4.0 + 1.6 * len(regimes), 1.0 + 0.42 * len(rows)))
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (key, title) in zip(axes, panels):
            m = np.full((len(rows), len(regimes)), np.nan)
            for r in cellrecs:
                m[rows.index(f"{r['design']} / {r['mitigation']}"), regimes.index(r["regime"])] = 100 * r[key][0]
            df = pd.DataFrame(m, index=rows, columns=regimes)
            lim = max(0.5, float(np.nanmax(np.abs(m)))) if np.isfinite(m).any() else 1.0
            sns.heatmap(df, ax=ax, annot=True, fmt=".2f", cmap="RdBu_r", vmin=-lim, vmax=lim, cbar=True)
            ax.set_title(title)
            ax.grid(False)
        fig.tight_layout()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(path), png_bytes(fig))


INTRO = (
    "Each cell is a co-location design x a training-side mitigation x a workload regime, run with the "
    "calibration protocol ({runs} runs: {seeds} seeds, {horizon}). Sync-excess is a run's SLO-violation rate minus "
    "the no_sync run's on the same seed, in percentage points; placement gain is a policy's sync-excess minus the "
    "mean of `matched_random[wa_diloco]` on the same seed (negative: placed better than random at the same merge "
    "budget), for two oracles spending wa_diloco's budget, `overlap_oracle` (minimises the request arrivals a merge "
    "overlaps: a proxy) and `sim_oracle` (simulates candidate placements on the seed and keeps the one with the "
    "fewest violations: a local search, exact on its own seed, that can profit from luck), and for wa_diloco; a "
    "cell whose values do not vary says so (all zero, no variance across seeds) instead of an interval; a design's "
    "deciding resource is the one whose `fleet.unlimited` control moves fixed's sync-excess the "
    "most (negative sync-excess: merges free a resource serving needed). Capacity cost: 1 - wa_diloco's largest "
    "load at 90% SLO attainment over no_sync's (bisection to 0.05 of a sidecar's capacity, 2 seeds, bursty cells "
    "only; the interval holds the bisection's bracket). Regenerate: "
    "`wadiloco sweep experiments/atlas.yaml --out DIR --workers 2`, then "
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
    return {"runs": sum(n.values()), "seeds": len(plan["seeds"]), "horizon": horizon}


def render(recs: list[dict[str, Any]], figure: str | None, meta: dict[str, Any] | None = None) -> str:
    lines = ["## When is a merge safe?", ""]
    if meta:
        lines += [INTRO.format(**meta), ""]
    if figure:
        lines += [f"![the atlas: sync-excess and placement gain per cell]({figure})", ""]
    lines += [p + "\n" for p in paragraphs(recs)]
    lines += table(recs) + [""]
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
    link = None
    if fig is not None:
        heatmap(recs, fig)
        base = Path(args.doc).resolve().parent if args.doc else Path.cwd()
        link = Path(*_rel(fig.resolve(), base)).as_posix()
    text = render(recs, link, facts(args.out_dir))
    if args.doc:
        update_page(args.doc, text)
    sys.stdout.write(json.dumps(recs, indent=1, default=float) + "\n" if args.json else text + "\n")
    return 0


def _rel(target: Path, base: Path) -> tuple[str, ...]:
    """target's path relative to base, with `..` where needed (a page links its figure)."""
    import os

    return tuple(Path(os.path.relpath(target, base)).parts)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
