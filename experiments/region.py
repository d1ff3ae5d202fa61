"""The safe operating region of a fleet, from paired runs: where merges add at most a threshold of SLO
violations, where that stops, and what decides it. Plain pandas and numpy (`wadiloco safe` runs the
grid, experiments/safe.py).

A *cell* is a load (a fraction of a sidecar's capacity) and a *row* (a merge interval, or the
policy's own placement). Its sync-excess is, per seed, the violation rate of the run with merges
minus the no_sync run's on the same seed (the same requests: common random numbers), in percentage
points; the mean over seeds carries a bootstrap CI (experiments.stats; none for data without
variance, which says so instead). A cell is `safe` when its CI lies at or below the threshold
(without a CI: its mean), `unsafe` when the CI lies above it, `uncertain` otherwise.

A row's *boundary* is the load where its mean sync-excess first rises above the threshold,
interpolated linearly between the grid loads on either side; the band around it is the same
crossing of the CI's high end (the earliest the boundary may be) and of its low end (the latest).
A row that never crosses is safe over the whole grid (no boundary inside it); one whose first load
is already above is unsafe from the lowest load searched. Past the boundary a row may fall below the
threshold again, where serving itself is already saturated: those cells are listed, not taken for
safe ground.

At the boundary (the first unsafe cell of the row that crosses first, or the worst cell where none
crosses) each `fleet.unlimited` control and each mitigation is the same cell with one thing changed;
its effect is its sync-excess minus the cell's, paired by seed. The *deciding resource* is the
control that removes the most of it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wadiloco.experiments.stats import CI, bootstrap_mean_ci
from wadiloco.models.rng import stream

SAFE, UNSAFE, UNCERTAIN = "safe", "unsafe", "uncertain"
INSIDE, BELOW, BEYOND = "inside", "below", "beyond"  # where a boundary lies against the grid
PP = 100.0  # percentage points per unit of a rate
CELL_COLUMNS = [
    *("load", "row", "sync_excess_pp", "ci_low_pp", "ci_high_pp", "note", "seeds", "state"),
    *("no_sync_violation_pct", "violation_pct", "merges_mean"),
]


def ci_of(x, *names: str) -> CI:
    """Mean and 95% bootstrap CI (9999 resamples, BCa, as a sweep's defaults), from a stream of its own."""
    return bootstrap_mean_ci(x, rng=stream(0, "bootstrap", "safe", *names))


def state(ci: CI, thr: float) -> str:
    """safe, unsafe or uncertain against the threshold `thr` (the mean where there is no interval)."""
    lo, hi = (ci.low, ci.high) if math.isfinite(ci.low) and math.isfinite(ci.high) else (ci.mean, ci.mean)
    return SAFE if hi <= thr else UNSAFE if lo > thr else UNCERTAIN


def cells(runs: pd.DataFrame, loads: dict[str, float], rows: list[str], thr_pp: float) -> pd.DataFrame:
    """One row per (load, row) from a grid's runs table (experiments.protocol.runs_table: regimes are
    loads, policy labels are rows), sync-excess in percentage points."""
    ok = runs[runs["status"] == "ok"]
    out = []
    for regime, load in loads.items():
        reg = ok[ok["regime"] == regime]
        base = reg[reg["role"] == "baseline"]
        for row in rows:
            r = reg[reg["policy"] == row]
            ci = ci_of(PP * r["sync_excess"].to_numpy(float), regime, row)
            rec = [load, row, ci.mean, ci.low, ci.high, ci.note, ci.n, state(ci, thr_pp)]
            rec += [PP * base["slo_violation_rate"].mean(), PP * r["slo_violation_rate"].mean()]
            rec += [float(r["merges"].astype(float).mean()) if len(r) else math.nan]
            out.append(rec)
    return pd.DataFrame(out, columns=CELL_COLUMNS)


def crossing(loads, ys, thr: float) -> tuple[float, str]:
    """(load, where): the load at which `ys` first rises above `thr`, linearly interpolated between
    the grid loads around it (`inside`); the first load when it is above already (`below`); NaN when
    it never is (`beyond`). NaN values count as not above."""
    xs, y = np.asarray(loads, float), np.asarray(ys, float)
    above = np.flatnonzero(np.nan_to_num(y, nan=-np.inf) > thr)
    if not len(above):
        return math.nan, BEYOND
    i = int(above[0])
    if i == 0:
        return float(xs[0]), BELOW
    y0 = y[i - 1] if math.isfinite(y[i - 1]) else thr
    return float(xs[i - 1] + (thr - y0) / (y[i] - y0) * (xs[i] - xs[i - 1])), INSIDE


def boundaries(grid: pd.DataFrame, thr_pp: float) -> pd.DataFrame:
    """Per row: the boundary load and where it lies, its band (the crossings of the CI's high and low
    ends; a missing end counts as the mean), the first unsafe grid load, and the loads past it where
    the row is below the threshold again (`safe_again`)."""
    out = []
    for row, g in grid.groupby("row", sort=False):
        g = g.sort_values("load")
        m = g["sync_excess_pp"].to_numpy(float)
        hi = np.where(np.isfinite(g["ci_high_pp"]), g["ci_high_pp"], m)
        lo = np.where(np.isfinite(g["ci_low_pp"]), g["ci_low_pp"], m)
        at, where = crossing(g["load"], m, thr_pp)
        early, _ = crossing(g["load"], hi, thr_pp)
        late, _ = crossing(g["load"], lo, thr_pp)
        first = g["load"].to_numpy()[m > thr_pp][0] if (m > thr_pp).any() else math.nan
        again = [float(x) for x, y in zip(g["load"], m) if x > first and not y > thr_pp]
        out.append([row, at, where, early, late, first, again])
    cols = ["row", "boundary_load", "where", "band_low", "band_high", "first_unsafe_load", "safe_again"]
    return pd.DataFrame(out, columns=cols)


def boundary_cell(grid: pd.DataFrame, bounds: pd.DataFrame) -> dict[str, Any]:
    """The cell the controls and mitigations run at: the first unsafe cell of the row whose boundary
    comes first; where no row crosses the threshold, the worst cell (largest mean sync-excess)."""
    crossed = bounds[bounds["where"] != BEYOND]
    if len(crossed):
        b = crossed.loc[crossed["boundary_load"].idxmin()]
        cell = grid[(grid["row"] == b["row"]) & (grid["load"] == b["first_unsafe_load"])].iloc[0]
        why = "the first cell above the threshold, in the row whose boundary comes first"
    else:
        cell = grid.loc[grid["sync_excess_pp"].idxmax()]
        why = "no cell is above the threshold: the cell with the largest sync-excess"
    return {"load": float(cell["load"]), "row": str(cell["row"]), "why": why}


def _per_seed(runs: pd.DataFrame, regime: str, label: str) -> pd.Series:
    """Sync-excess in points per seed of the completed runs of (regime, policy label)."""
    r = runs[(runs["status"] == "ok") & (runs["regime"] == regime) & (runs["policy"] == label)]
    return PP * r.groupby("seed")["sync_excess"].mean()


def excess(runs: pd.DataFrame, regime: str, label: str, thr_pp: float) -> dict[str, Any]:
    """One cell's sync-excess in points (mean, CI, the note that replaces a missing one) and state."""
    ci = ci_of(_per_seed(runs, regime, label).to_numpy(float), regime, label)
    return {
        "sync_excess_pp": ci.mean,
        "ci_low_pp": ci.low,
        "ci_high_pp": ci.high,
        "note": ci.note,
        "state": state(ci, thr_pp),
    }


def effects(runs: pd.DataFrame, cell: tuple[str, str], variants: dict[str, tuple[str, str]], thr_pp: float):
    """Each variant's sync-excess and its effect (variant minus the cell, paired by seed), in points,
    and its completed merges per run, from the boundary runs. `cell` and each variant are (regime,
    policy label) of those runs."""
    base = _per_seed(runs, *cell)
    out = []
    for name, (regime, label) in variants.items():
        v = _per_seed(runs, regime, label)
        se = ci_of(v.to_numpy(float), "variant", name)
        d = (v - base).dropna()
        eff = ci_of(d.to_numpy(float), "effect", name)
        r = runs[(runs["status"] == "ok") & (runs["regime"] == regime) & (runs["policy"] == label)]
        merges = float(r["merges"].astype(float).mean()) if len(r) else math.nan
        out.append([name, se.mean, se.low, se.high, se.note, eff.mean, eff.low, eff.high, eff.note, state(se, thr_pp)])
        out[-1].append(merges)
    cols = ["variant", "sync_excess_pp", "ci_low_pp", "ci_high_pp", "note", "effect_pp", "effect_low_pp"]
    return pd.DataFrame(out, columns=[*cols, "effect_high_pp", "effect_note", "state", "merges_mean"])


def verdict(row: pd.Series, cell_pp: float, thr_pp: float) -> str:
    """What a control or mitigation does to the cell's sync-excess, in words."""
    eff, hi = row["effect_pp"], row["effect_high_pp"]
    sure = hi < 0 if math.isfinite(hi) else eff < 0
    if cell_pp > thr_pp and row["sync_excess_pp"] <= thr_pp and eff < 0:
        return "removes it" if row["state"] == SAFE else "brings it below the threshold (CI reaches above)"
    if sure:
        return "reduces it"
    up = row["effect_low_pp"] > 0 if math.isfinite(row["effect_low_pp"]) else eff > 0
    return "raises it" if up else "no clear effect"


def deciding(controls: pd.DataFrame, cell_pp: float, thr_pp: float) -> dict[str, Any] | None:
    """The control that removes the most of the cell's sync-excess (the lowest remaining, ties: the
    nearest zero), and the others that remove it too; None when none reduces it."""
    if controls.empty:
        return None
    ranked = controls.assign(v=[verdict(r, cell_pp, thr_pp) for _, r in controls.iterrows()])
    useful = ranked[ranked["v"] != "no clear effect"]
    useful = useful[useful["effect_pp"] < 0]
    if useful.empty:
        return None
    order = useful.assign(key=useful["effect_pp"], tie=useful["sync_excess_pp"].abs()).sort_values(["key", "tie"])
    best = order.iloc[0]
    also = [str(r["variant"]) for _, r in order.iloc[1:].iterrows() if r["v"] == "removes it"]
    return {"resource": str(best["variant"]), "verdict": str(best["v"]), "also": also}
