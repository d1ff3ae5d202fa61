"""The atlas' heatmaps (experiments/studies/atlas_table.py makes the records they draw).

- `heatmap`: rows design / mitigation, columns regime, each cell at its regime's own load: fixed's
  sync-excess with the deciding resource under it, and wa_diloco's placement gain over matched
  random; a hatched cell's interval holds 0 (or it has none: all zero), so its colour is no finding.
- `load_heatmap`: one panel per design, rows mitigation / regime, columns the loads each cell ran
  at, ascending: fixed's sync-excess, hatched the same way, the deciding resource under it where the
  cell's controls ran: where merges stop being safe as the load grows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HATCH = "////"


def _holds_zero(t) -> bool:
    """A (mean, low, high[, note]) whose interval holds 0, or that has none (all zero, no data)."""
    m, lo, hi = t[:3]
    if not math.isfinite(m):
        return False
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return m == 0
    return lo <= 0 <= hi


def _draw(ax, values: np.ndarray, labels: np.ndarray, hatch: np.ndarray, rows, cols, title: str) -> None:
    """One annotated heatmap panel on a diverging scale centred at 0, `hatch`ed cells crossed."""
    import seaborn as sns

    lim = max(0.5, float(np.nanmax(np.abs(values)))) if np.isfinite(values).any() else 1.0
    df = pd.DataFrame(values, index=rows, columns=cols)
    sns.heatmap(df, ax=ax, annot=labels, fmt="", cmap="RdBu_r", vmin=-lim, vmax=lim, cbar=True,
                annot_kws={"fontsize": 7})  # fmt: skip
    for i, j in zip(*np.nonzero(hatch)):
        ax.add_patch(_Rect((j, i), 1, 1, fill=False, hatch=HATCH, edgecolor="0.45", linewidth=0))
    ax.set_title(title, fontsize=10)
    ax.grid(False)


def _Rect(*a, **k):
    from matplotlib.patches import Rectangle

    return Rectangle(*a, **k)


def _cell_text(t, decision: dict[str, Any] | None = None) -> str:
    if not math.isfinite(t[0]):
        return ""
    text = f"{100 * t[0]:+.2f}"
    if decision and decision.get("resource"):
        text += f"\n{decision['resource']}"
    return text


def _save(fig, path: str | Path) -> None:
    from wadiloco.experiments.figures import png_bytes
    from wadiloco.experiments.output import write_atomic

    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(path), png_bytes(fig))


def heatmap(cells: list[dict[str, Any]], path: str | Path) -> None:
    """Two panels over the cells at their own loads: fixed's sync-excess (with the deciding resource)
    and wa_diloco's placement gain over matched random; hatched where the interval holds 0."""
    from matplotlib.figure import Figure

    from wadiloco.experiments.figures import style

    regimes = list(dict.fromkeys(r["regime"] for r in cells))
    rows = list(dict.fromkeys(f"{r['design']} / {r['mitigation']}" for r in cells))
    panels = (("se_fixed", "fixed: sync-excess (pp); under it, the deciding resource"),
              ("gain_wa", "wa_diloco - matched random (pp)"))  # fmt: skip
    with style():
        fig = Figure(figsize=(4.0 + 1.8 * len(regimes), 1.6 + 0.46 * len(rows)))
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (key, title) in zip(axes, panels):
            shape = (len(rows), len(regimes))
            vals, labels, hatch = np.full(shape, np.nan), np.full(shape, "", dtype=object), np.zeros(shape, bool)
            for r in cells:
                i, j = rows.index(f"{r['design']} / {r['mitigation']}"), regimes.index(r["regime"])
                vals[i, j] = 100 * r[key][0]
                labels[i, j] = _cell_text(r[key], r.get("decision") if key == "se_fixed" else None)
                hatch[i, j] = _holds_zero(r[key])
            _draw(ax, vals, labels, hatch, rows, regimes, title)
        fig.suptitle("Hatched: the interval holds 0 (or the cell has none: all zero)", fontsize=9, y=0.995)
        _save(fig, path)


def load_heatmap(groups: dict[tuple[str, str, str], list[dict[str, Any]]], path: str | Path) -> None:
    """One panel per design: rows mitigation / regime, columns its loads (ascending), fixed's
    sync-excess with the deciding resource where its controls ran, hatched where the interval holds 0."""
    from matplotlib.figure import Figure

    from wadiloco.experiments.figures import style

    designs = list(dict.fromkeys(d for d, _, _ in groups))
    n_rows = max(sum(1 for k in groups if k[0] == d) for d in designs)
    with style():
        fig = Figure(figsize=(5.2 * len(designs), 1.6 + 0.36 * n_rows))
        axes = np.atleast_1d(fig.subplots(1, len(designs)))
        for ax, design in zip(axes, designs):
            mine = {k: v for k, v in groups.items() if k[0] == design}
            n = max(len(v) for v in mine.values())
            rows = [f"{m} / {reg}" for _, m, reg in mine]
            cols = [_loads_at(list(mine.values()), i) for i in range(n)]
            shape = (len(rows), n)
            vals, labels, hatch = np.full(shape, np.nan), np.full(shape, "", dtype=object), np.zeros(shape, bool)
            for i, rs in enumerate(mine.values()):
                for j, r in enumerate(rs):
                    vals[i, j] = 100 * r["se_fixed"][0]
                    labels[i, j] = _cell_text(r["se_fixed"], r.get("decision"))
                    hatch[i, j] = _holds_zero(r["se_fixed"])
            _draw(ax, vals, labels, hatch, rows, cols, f"{design}: fixed's sync-excess (pp) by load")
            ax.set_xlabel("load (fraction of a sidecar's capacity)")
        _save(fig, path)


def _loads_at(rows: list[list[dict[str, Any]]], i: int) -> str:
    """The column's label: the loads at rank i (regimes of one design may differ a little: 0.45/0.5)."""
    loads = sorted({r[i]["at"] for r in rows if len(r) > i and r[i]["at"] is not None})
    return "/".join(f"{x:g}" for x in loads) or "?"
