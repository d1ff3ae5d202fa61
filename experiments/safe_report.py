"""What `wadiloco safe` says and writes: the text answer, safe.json (with provenance), cells.csv, one
figure (the region's sync-excess per cell, its boundary with the band, and each row's sync-excess
against load with its CI band) and a one-page report, safe.md and a self-contained safe.html (the
figure embedded). The numbers are experiments/region.py's; names in them are escaped where they land
(experiments.report's renderers)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wadiloco.experiments.region import BELOW, BEYOND, SAFE, UNCERTAIN, UNSAFE

FILES = ("safe.md", "safe.html", "safe.png", "safe.json", "cells.csv")


def result(job, res: dict[str, Any], provenance: dict[str, Any]) -> dict[str, Any]:
    """The answer as plain data (safe.json, `--json`)."""
    return {
        "scenario": job.sc.name,
        "policy": job.policy,
        "threshold_pp": job.threshold,
        "seeds": job.seeds,
        "loads": job.loads,
        "rows": job.rows,
        "boundaries": res["boundaries"].to_dict("records"),
        "boundary_cell": res["cell"],
        "deciding_resource": res["deciding"],
        "controls": res["controls"].to_dict("records"),
        "mitigations": res["mitigations"].to_dict("records"),
        "not_run": job.skipped,
        "cells": res["grid"].to_dict("records"),
        "runs": {**res["runs"], "backend": res["backend"], "workers": res["workers"], "wall_s": res["wall_s"]},
        "provenance": provenance,
    }


def pp(m: float, lo: float = math.nan, hi: float = math.nan, note: str = "") -> str:
    """Points with their CI, or why there is none."""
    if not math.isfinite(m):
        return "n/a"
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}] pp"
    return f"{m:+.2f} pp" + (f" ({note})" if note else "")


def _pp(r: dict) -> str:
    return pp(r["sync_excess_pp"], r["ci_low_pp"], r["ci_high_pp"], r.get("note") or "")


def _effect(r: dict) -> str:
    return pp(r["effect_pp"], r["effect_low_pp"], r["effect_high_pp"], r.get("effect_note") or "")


def boundary_text(b: dict, top: float, low: float) -> str:
    """One row's boundary in words."""
    if b["where"] == BEYOND and math.isfinite(b["band_low"]):
        return (
            f"{b['row']}: below the threshold at every load of the grid (up to {top:g}), but its CI reaches "
            f"above it from load {b['band_low']:.2f}"
        )
    if b["where"] == BEYOND:
        return f"{b['row']}: safe at every load of the grid (up to {top:g})"
    if b["where"] == BELOW:
        return f"{b['row']}: above the threshold already at the lowest load ({low:g})"
    lo, hi = b["band_low"], b["band_high"]
    band = f"[{lo:.2f}, {hi:.2f}]" if math.isfinite(hi) else f"[{lo:.2f}, beyond the grid]"
    return f"{b['row']}: safe up to load {b['boundary_load']:.2f} {band}"


def _again(b: dict, cells: list[dict]) -> str:
    """Where a row is below the threshold again past its boundary, and what no_sync does there."""
    if not b["safe_again"]:
        return ""
    at = [c for c in cells if c["row"] == b["row"] and c["load"] in b["safe_again"]]
    worst = min(c["no_sync_violation_pct"] for c in at)
    return (
        f"{b['row']} is below the threshold again at {len(at)} load(s) from {min(b['safe_again']):g}, where "
        f"serving violates its SLO on at least {worst:.1f}% of requests without merges: not safe ground"
    )


def few_merges(cells: list[dict]) -> list[str]:
    """Rows whose runs made no merge at some loads: a cell without merges says nothing about them."""
    out = []
    for row in dict.fromkeys(c["row"] for c in cells):
        none = [c["load"] for c in cells if c["row"] == row and not c["merges_mean"] >= 1]
        if none:
            out.append(
                f"{row} made less than one merge per run at {len(none)} load(s) (from {min(none):g}): those cells "
                "say nothing about merges (lengthen --horizon or shorten the interval)"
            )
    return out


def headline(r: dict[str, Any]) -> list[str]:
    """The answer's first lines: the region, then the boundary cell and what decides it."""
    top, low = max(r["loads"]), min(r["loads"])
    c = r["boundary_cell"]
    lines = [
        f"{r['scenario']} ({r['policy']}): where merges add at most {r['threshold_pp']:g} pp of SLO violations "
        f"(sync-excess against no_sync on the same seed; mean and 95% CI over {len(r['seeds'])} seeds)",
        "safe region: " + "; ".join(boundary_text(b, top, low) for b in r["boundaries"]),
    ]
    lines += [f"  {t}" for t in (_again(b, r["cells"]) for b in r["boundaries"]) if t]
    lines += [f"  warning: {w}" for w in few_merges(r["cells"])]
    lines.append(f"at the boundary (load {c['load']:g}, {c['row']}: {c['why']}): sync-excess {_pp(c)}")
    d = r["deciding_resource"]
    if d is None:
        lines.append("deciding resource: none; no unlimited-resource control reduces it")
    else:
        row = next(x for x in r["controls"] if x["variant"] == d["resource"])
        also = f"; also: {', '.join(d['also'])}" if d["also"] else ""
        lines.append(
            f"deciding resource: {d['resource']} (unlimited {d['resource']}: {_pp(row)}, {d['verdict']}{also})"
        )
    return lines


def text(r: dict[str, Any], folder: Path | None) -> str:
    """The text answer: the headline, each control's and mitigation's effect, what did not run, the runs."""
    lines = headline(r)
    lines.append("each resource unlimited at the boundary (effect: its sync-excess minus the cell's, by seed):")
    lines += [f"  {x['variant']:<10} {_pp(x):<34} effect {_effect(x):<34} {x['verdict']}" for x in r["controls"]]
    lines.append(
        f"each mitigation at the boundary (merges per run: the cell's {r['boundary_cell']['merges_mean']:.1f}):"
    )
    lines += [
        f"  {x['variant']:<36} {_pp(x):<34} effect {_effect(x):<34} {x['verdict']} ({x['merges_mean']:.1f} merges/run)"
        for x in r["mitigations"]
    ]
    lines += [f"not run: {s}" for s in r["not_run"]]
    n = r["runs"]
    failed = f", {n['failed']} failed (see the runs' stores)" if n["failed"] else ""
    total = n["grid"] + n["boundary"]
    earlier = f", {total - n['ran']} kept from an earlier run" if n["ran"] < total else ""
    lines.append(
        f"{total} runs (grid {n['grid']}, boundary {n['boundary']}{earlier}{failed}) on {n['backend']} "
        f"with {n['workers']} worker(s) in {n['wall_s']:.1f} s"
        + (f"; {', '.join(FILES)} in {folder}" if folder else "")
    )
    return "\n".join(lines)


# ---- files ------------------------------------------------------------------------------------------


def write(out, r: dict[str, Any], res: dict[str, Any]) -> None:
    """safe.png first (the HTML embeds it), then cells.csv, safe.json, safe.md and safe.html."""
    from wadiloco.experiments.output import dumps
    from wadiloco.experiments.report import FLOAT_FORMAT, render_html, render_md

    out.write("safe.png", figure(res["grid"], res["boundaries"], r))
    out.write("cells.csv", res["grid"].to_csv(index=False, float_format=FLOAT_FORMAT))
    out.write("safe.json", dumps(r) + "\n")
    blocks = page(r, res)
    out.write("safe.md", render_md(blocks))
    out.write("safe.html", render_html(f"When is a merge safe? {r['scenario']}", blocks, out.path))


def page(r: dict[str, Any], res: dict[str, Any]) -> list[tuple]:
    """The one-page report's blocks (experiments.report: render_md, render_html)."""
    h = headline(r)
    grid = res["grid"]
    blocks: list[tuple] = [
        ("h1", f"When is a merge safe? {r['scenario']} ({r['policy']})"),
        ("p", h[0] + "."),
        ("ul", [x.strip() for x in h[1:]]),
        ("img", "safe.png", "sync-excess per cell, the boundary and its band; sync-excess against load with CIs"),
        ("h2", "The boundary"),
        ("table", _bounds_table(r)),
        ("h2", f"At the boundary: load {r['boundary_cell']['load']:g}, {r['boundary_cell']['row']}"),
        (
            "p",
            "Each control is the boundary cell with one resource unlimited (`fleet.unlimited`): nothing queues on "
            "it, so the interference it carries goes. Each mitigation is the cell with one change to how merges run, "
            "or another placement of them. Effect: the variant's sync-excess minus the cell's, paired by seed.",
        ),
        ("table", _variants_table(res["controls"], "resource unlimited")),
        ("table", _variants_table(res["mitigations"], "mitigation")),
    ]
    if r["not_run"]:
        blocks += [("p", "Not run:"), ("ul", r["not_run"])]
    blocks += [("h2", "Every cell (sync-excess, pp)"), ("table", _cells_table(grid)), ("h2", "How this was made")]
    blocks.append(("ul", _made(r)))
    return blocks


def _bounds_table(r: dict[str, Any]) -> pd.DataFrame:
    top, low = max(r["loads"]), min(r["loads"])
    rows = []
    for b in r["boundaries"]:
        rows.append([b["row"], boundary_text(b, top, low).split(": ", 1)[1], _again(b, r["cells"]) or "-"])
    return pd.DataFrame(rows, columns=["row", "boundary (load, band)", "past it"])


def _variants_table(t: pd.DataFrame, what: str) -> pd.DataFrame:
    rows = [[x["variant"], _pp(x), _effect(x), x["verdict"], f"{x['merges_mean']:.1f}"] for x in t.to_dict("records")]
    return pd.DataFrame(rows, columns=[what, "sync-excess", "effect", "verdict", "merges per run"])


def _cells_table(grid: pd.DataFrame) -> pd.DataFrame:
    mark = {SAFE: "", UNSAFE: " *", UNCERTAIN: " ?"}
    t = grid.assign(v=[_pp(c).replace(" pp", "") + mark[c["state"]] for c in grid.to_dict("records")])
    wide = t.pivot(index="load", columns="row", values="v")[list(dict.fromkeys(grid["row"]))]
    base = grid.groupby("load")["no_sync_violation_pct"].first().map(lambda x: f"{x:.2f}%")
    return wide.assign(**{"no_sync violations": base}).reset_index()


def _made(r: dict[str, Any]) -> list[str]:
    p, n = r["provenance"], r["runs"]
    return [
        f"scenario {p['scenario_file']} (digest {p['scenario_digest']}), overrides {p['overrides'] or 'none'}",
        f"policy {p['policy']} {p['policy_params']}; rows {', '.join(r['rows'])}; "
        f"loads {', '.join(map(str, r['loads']))}",
        f"seeds {r['seeds']} (common random numbers: every cell's runs on a seed serve the same requests); "
        "95% bootstrap CIs (9999 resamples, BCa) over seeds, none where the seeds do not vary",
        f"cells: `*` above the threshold with its CI, `?` the CI straddles it; {n['grid'] + n['boundary']} runs "
        f"on {n['backend']}, {n['workers']} worker(s), {n['wall_s']:.1f} s",
        f"wadiloco {p['version']} (git {p['git_revision']}), serving core {p['serving_core']}",
    ]


# ---- the figure -------------------------------------------------------------------------------------


def _x(loads: list[float], load: float) -> float:
    """A load's position on the heatmap's axis of grid loads (cell centres 0, 1, ...), interpolated."""
    i = int(np.searchsorted(loads, load))
    if i <= 0:
        return 0.0
    if i >= len(loads):
        return float(len(loads) - 1)
    a, b = loads[i - 1], loads[i]
    return i - 1 + (load - a) / (b - a)


def figure(grid: pd.DataFrame, bounds: pd.DataFrame, r: dict[str, Any]) -> bytes:
    """Left: each cell's mean sync-excess (hatched where its CI straddles the threshold, outlined where
    it lies above), each row's boundary (a black bar) and band (a grey span). Right: each row's
    sync-excess against load with its CI band, the threshold dashed."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from wadiloco.experiments.figures import png_bytes, style

    loads, rows = sorted(grid["load"].unique()), list(dict.fromkeys(grid["row"]))
    thr = r["threshold_pp"]
    with style():
        fig = Figure(figsize=(max(9.0, 0.45 * len(loads) + 5.5), 1.2 + 0.6 * len(rows) + 2.4))
        ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        m = grid.pivot(index="row", columns="load", values="sync_excess_pp").loc[rows, loads].to_numpy(float)
        lim = max(thr * 2, float(np.nanmax(np.abs(m))) if np.isfinite(m).any() else 1.0)
        im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        fig.colorbar(im, ax=ax, label="sync-excess (pp)", shrink=0.8)
        for c in grid.to_dict("records"):
            x, y = loads.index(c["load"]), rows.index(c["row"])
            if c["state"] != SAFE:
                hatch = "////" if c["state"] == UNCERTAIN else None
                ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch=hatch, lw=1.2, ec="k"))
        for b in bounds.to_dict("records"):
            if b["where"] == BEYOND:
                continue
            y, below = rows.index(b["row"]), b["where"] == BELOW  # (below the grid: at its left edge)
            lo = -0.5 if below else _x(loads, b["band_low"])
            hi = _x(loads, b["band_high"]) if math.isfinite(b["band_high"]) else len(loads) - 0.5
            ax.add_patch(Rectangle((lo, y - 0.45), max(hi - lo, 0.05), 0.9, color="0.3", alpha=0.3, lw=0))
            x = -0.5 if below else _x(loads, b["boundary_load"])
            ax.plot([x, x], [y - 0.45, y + 0.45], color="k", lw=3)
        ax.set_xticks(range(len(loads)), [f"{x:g}" for x in loads], rotation=90, fontsize=8)
        ax.set_yticks(range(len(rows)), rows)
        ax.set_xlabel("load (fraction of a sidecar's capacity)")
        ax.set_title(f"safe region at {thr:g} pp: boundary (black) and band (grey)", fontsize=10)
        ax.grid(False)
        _lines(ax2, grid, rows, thr)
        fig.suptitle(f"When is a merge safe? {r['scenario']} ({r['policy']}), {len(r['seeds'])} seeds", fontsize=11)
        fig.tight_layout()
        return png_bytes(fig, dpi=110)


def _lines(ax, grid: pd.DataFrame, rows: list[str], thr: float) -> None:
    for row in rows:
        g = grid[grid["row"] == row].sort_values("load")
        m = g["sync_excess_pp"].to_numpy(float)
        lo = np.where(np.isfinite(g["ci_low_pp"]), g["ci_low_pp"], m)
        hi = np.where(np.isfinite(g["ci_high_pp"]), g["ci_high_pp"], m)
        (line,) = ax.plot(g["load"], m, marker="o", ms=3, label=row)
        ax.fill_between(g["load"], lo, hi, color=line.get_color(), alpha=0.2, lw=0)
    ax.axhline(thr, ls="--", color="k", lw=1, label=f"threshold {thr:g} pp")
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xlabel("load (fraction of a sidecar's capacity)")
    ax.set_ylabel("sync-excess (pp), mean and 95% CI")
    ax.legend(fontsize=8, loc="best")
