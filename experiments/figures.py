"""Sweep figures (seaborn styles on matplotlib `Figure` objects), each written atomically as PNG.

- sync_excess.png: each policy's sync-excess SLO violation (its rate minus no_sync's on the same
  seed) per regime, mean and bootstrap CI, on a scale fitted to the CIs (violation rates
  themselves are nearly equal in every regime and would hide the differences);
- envelope.png: each matched-random control's sync-excess over draws x seeds, its envelope, and
  every policy's mean sync-excess (with CI) marked;
- timeline_<regime>.png: one seed's request rate, queue length and violations, each policy's
  difference from no_sync's, and the merge windows;
- tradeoff.png: sync-excess SLO violation against modelled final loss (training progress).

Figures never go through pyplot: no global backend is switched (a notebook that imports this
keeps its inline plots) and nothing is left open. A panel whose values are all equal says so in
words instead of showing an axis of rounding noise.
"""

from __future__ import annotations

import io
import math
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from wadiloco.experiments.output import write_atomic
from wadiloco.experiments.protocol import LOSS, SE
from wadiloco.models.results.metrics import SYNC_EXCESS

ROLE_COLORS = {"baseline": "#7f7f7f", "policy": "#1f77b4", "control": "#ff7f0e"}
MARKERS = ["D", "o", "s", "^", "v", "P", "X", "*"]


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "regime"


@contextmanager
def style():
    """seaborn's whitegrid look for the figures drawn inside, without touching global settings."""
    with rc_context({**sns.axes_style("whitegrid"), **sns.plotting_context("notebook")}):
        yield


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _save(fig: Figure, path: Path, rect: tuple[float, ...] | None = (0, 0, 1, 0.96)) -> None:
    """Lay out within `rect` (room for the suptitle, and for a figure legend below when given;
    None: laid out already) and write the PNG."""
    if rect is not None:
        fig.tight_layout(rect=rect)  # no label runs into a neighbour
    write_atomic(path, png_bytes(fig))


def _grid(n: int, w: float = 5.2, h: float = 3.8, **kw):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(w * cols, h * rows), **kw)
    axes = fig.subplots(rows, cols, squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _err(y, lo, hi):
    y, lo, hi = (np.asarray(v, dtype=float) for v in (y, lo, hi))
    lo = np.where(np.isfinite(lo), lo, y)
    hi = np.where(np.isfinite(hi), hi, y)
    return np.vstack([np.maximum(y - lo, 0), np.maximum(hi - y, 0)])


def flat_panel(ax, values, what: str, unit: str = "") -> bool:
    """When every finite value (CIs included) is the same, say so on the panel and show one tick:
    matplotlib would otherwise spread rounding noise over a +/-0.05 axis. True if it was flat."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if len(v) == 0 or np.ptp(v) > 1e-12 * max(1.0, float(np.max(np.abs(v)))):
        return False
    c = float(v[0])
    ax.set_ylim(c - 1, c + 1)
    ax.set_yticks([c])
    ax.text(
        0.5,
        0.9,
        f"{what}: {c:g}{unit} for every policy",
        ha="center",
        va="top",
        transform=ax.transAxes,
        fontsize=9,
        bbox={"facecolor": "white", "alpha": 0.85, "lw": 0},
    )
    return True


def _policy_colors(labels) -> dict[str, Any]:
    """One colour per policy label, the same in every panel."""
    labels = list(dict.fromkeys(labels))
    return dict(zip(labels, sns.color_palette("tab10", max(len(labels), 1)) * (1 + len(labels) // 10)))


def sync_excess(summary: pd.DataFrame, regimes: list[str], path: Path) -> None:
    """Mean sync-excess per policy with its CI, one panel per regime, in percentage points."""
    with style():
        fig, axes = _grid(len(regimes), h=4.0)
        for ax, reg in zip(axes, regimes):
            sub = summary[summary["regime"] == reg].reset_index(drop=True)
            y = sub[f"{SE}_mean"].astype(float).to_numpy() * 100
            lo, hi = (sub[f"{SE}_ci_{e}"].astype(float).to_numpy() * 100 for e in ("low", "high"))
            x = np.arange(len(sub))
            for i, row in sub.iterrows():
                ax.errorbar(
                    [x[i]],
                    [y[i]],
                    yerr=_err([y[i]], [lo[i]], [hi[i]]),
                    fmt="o",
                    ms=6,
                    capsize=4,
                    color=ROLE_COLORS.get(row["role"], "black"),
                )
            ax.axhline(0, color="grey", lw=0.8)
            flat_panel(ax, [*y, *lo, *hi], "sync-excess", " pts")
            ax.set_xticks(x, [str(p) for p in sub["policy"]], rotation=35, ha="right")
            ax.set_xlim(-0.6, len(sub) - 0.4)
            ax.set_title(reg)
            ax.set_ylabel("sync-excess SLO violation (pts)")
        handles = [Rectangle((0, 0), 1, 1, color=c) for c in ROLE_COLORS.values()]
        fig.legend(handles, list(ROLE_COLORS), loc="lower center", ncol=3, fontsize=8, frameon=False)
        fig.suptitle("Sync-excess SLO violation per policy (mean over seeds, 95% bootstrap CI; 0 = no_sync)")
        _save(fig, path, rect=(0, 0.05, 1, 0.96))


def envelope(summary: pd.DataFrame, runs: pd.DataFrame, regimes: list[str], path: Path) -> None:
    with style():
        fig, axes = _grid(len(regimes), h=4.6)
        for ax, reg in zip(axes, regimes):
            s = summary[summary["regime"] == reg]
            ctrl = s[s["role"] == "control"].reset_index(drop=True)
            pols = s[s["role"] == "policy"].reset_index(drop=True)
            ax.set_title(reg)
            if ctrl.empty:
                ax.text(0.5, 0.5, "no matched-random control", ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([])
                continue
            r = runs[(runs["regime"] == reg) & (runs["role"] == "control") & (runs["status"] == "ok")]
            order = list(ctrl["policy"])
            dots = r[SYNC_EXCESS].astype(float) * 100
            sns.stripplot(
                x=r["policy"], y=dots, order=order, color=ROLE_COLORS["control"], alpha=0.45, size=4, jitter=0.18, ax=ax
            )
            _bands(ax, ctrl)
            ys, ticks = _mark_policies(ax, pols, order)
            flat_panel(ax, [*dots, *ys], "sync-excess", " pts")
            ax.set_xticks(range(len(ticks)), [t.replace("matched_random", "MR") for t in ticks])
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_xlim(-0.6, len(ticks) - 0.4 + (0.25 if len(ticks) == len(order) else 0))
            ax.set_xlabel("")
            ax.set_ylabel("sync-excess SLO violation (pts)")
            ax.tick_params(axis="x", rotation=15)
            if len(pols):  # below the panel: a legend inside would cover the dots
                ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
        fig.suptitle("Matched-random (MR) envelope (dots: draws x seeds; band: envelope) and policies (mean, CI)")
        _save(fig, path)


def _bands(ax, ctrl: pd.DataFrame) -> None:
    for i, row in ctrl.iterrows():
        lo, hi = row["mr_envelope_low"] * 100, row["mr_envelope_high"] * 100
        if math.isfinite(lo) and math.isfinite(hi):
            if hi > lo:
                ax.add_patch(Rectangle((i - 0.35, lo), 0.7, hi - lo, color=ROLE_COLORS["control"], alpha=0.18, lw=0))
            else:
                ax.hlines(lo, i - 0.35, i + 0.35, color=ROLE_COLORS["control"], lw=4, alpha=0.4)


def _mark_policies(ax, pols: pd.DataFrame, order: list[str]) -> tuple[list[float], list[str]]:
    """Each evaluated policy: its mean sync-excess with CI, beside the control spending the same
    merge budget, or in a last column when no control does. Returns the values drawn and the ticks."""
    unpaired = [r["policy"] for _, r in pols.iterrows() if r["matched_control"] not in order]
    slot: dict[str, int] = {}
    drawn: list[float] = []
    for j, row in pols.iterrows():
        y = row[f"{SE}_mean"] * 100
        if not math.isfinite(y):
            continue
        if row["matched_control"] in order:
            k = slot[row["matched_control"]] = slot.get(row["matched_control"], -1) + 1
            x = order.index(row["matched_control"]) + 0.42 + 0.1 * k
        else:
            x = len(order) + 0.15 * (unpaired.index(row["policy"]) - (len(unpaired) - 1) / 2)
        lo, hi = row[f"{SE}_ci_low"] * 100, row[f"{SE}_ci_high"] * 100
        drawn += [y, lo, hi]
        ax.errorbar(
            [x],
            [y],
            yerr=_err([y], [lo], [hi]),
            fmt=MARKERS[j % len(MARKERS)],
            color=sns.color_palette("dark", 8)[j % 8],
            capsize=3,
            ms=7,
            label=row["policy"],
        )
    return drawn, order + (["(no matched control)"] if unpaired else [])


def _baseline_label(timelines: dict[str, dict[str, Any]], roles: dict[str, str]) -> str | None:
    return next((lab for lab in timelines if roles.get(lab) == "baseline"), None)


def timeline(timelines: dict[str, dict[str, Any]], roles: dict[str, str], regime: str, seed: int, path: Path) -> None:
    """`timelines`: policy label -> compact timeline of that policy's run on `seed` (draw 0). The
    policies share arrivals, so their queues and violations nearly coincide and one line would hide
    the others: the no_sync run's are drawn as filled areas, and every other policy's as its
    difference from them."""
    labels = [lab for lab in timelines if timelines[lab] and timelines[lab].get("t")]
    with style():
        fig = Figure(figsize=(11, 12))
        ratios = [1, 1, 1, 1, 1, 0.25 + 0.22 * max(len(labels), 1)]
        axes = fig.subplots(6, 1, sharex=True, gridspec_kw={"height_ratios": ratios})
        if not labels:
            axes[0].text(0.5, 0.5, "no timeline stored", ha="center", transform=axes[0].transAxes)
            _save(fig, path)
            return
        pal = _policy_colors(labels)
        base = next((lab for lab in labels if roles.get(lab) == "baseline"), labels[0])
        first = timelines[base]
        t = np.asarray(first["t"], dtype=float)
        bin_s = float(first.get("bin_s") or 1.0)
        axes[0].plot(t, np.asarray(first["arrivals"], dtype=float) / bin_s, color="black", lw=0.9)
        axes[0].set_ylabel("requests/s\n(fleet)")
        for i, key, scale, name in (
            (1, "queue", 1.0, "queued\nrequests"),
            (3, "violations", bin_s, "SLO violations/s\n(by arrival)"),
        ):
            axes[i].fill_between(t, np.asarray(first[key], dtype=float) / scale, color=pal[base], alpha=0.4, lw=0)
            axes[i].set_ylabel(f"{name}\n{base}")
            _differences(axes[i + 1], timelines, labels, base, key, scale, pal)
            axes[i + 1].set_ylabel(f"{name.split(chr(10))[0]}\nminus {base}")
        _merge_bars(axes, timelines, labels, pal)
        fig.suptitle(f"{regime}, seed {seed}: request rate, queue, violations and merge windows")
        _save(fig, path)


def _differences(ax, timelines, labels: list[str], base: str, key: str, scale: float, pal) -> None:
    """Each policy's `key` series minus the baseline's, on the baseline's time grid."""
    ref = np.asarray(timelines[base][key], dtype=float) / scale
    others = [lab for lab in labels if lab != base]
    drawn = []
    for k, lab in enumerate(others):
        tl = timelines[lab]
        y = np.asarray(tl[key], dtype=float) / scale
        n = min(len(y), len(ref))
        d = y[:n] - ref[:n]
        drawn.append(d)
        ax.plot(
            np.asarray(tl["t"], dtype=float)[:n], d, lw=0.9, color=pal[lab], label=lab, ls=("-", "--", ":", "-.")[k % 4]
        )
    ax.axhline(0, color="grey", lw=0.6)
    if not others:
        ax.text(0.5, 0.5, "only one policy stored", ha="center", va="center", transform=ax.transAxes)
    elif all(np.all(d == 0) for d in drawn):
        ax.text(0.5, 0.8, f"identical to {base} throughout", ha="center", va="top", transform=ax.transAxes, fontsize=9)
    else:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _merge_bars(axes, timelines, labels: list[str], pal) -> None:
    bars = axes[-1]
    for i, lab in enumerate(labels):
        spans = [(a, b - a) for a, b in timelines[lab].get("merges", []) if a is not None and b is not None]
        bars.broken_barh(spans, (i - 0.35, 0.7), color=pal[lab])
        for a, _ in spans:
            for ax in axes[:-1]:
                ax.axvline(a, color=pal[lab], lw=0.4, alpha=0.35)
    bars.set_yticks(range(len(labels)), labels, fontsize=7)
    bars.set_ylim(-0.6, len(labels) - 0.4)
    bars.set_ylabel("merges")
    bars.set_xlabel("simulated time (s)")


def tradeoff(summary: pd.DataFrame, regimes: list[str], path: Path) -> None:
    """Sync-excess against modelled final loss per policy; one legend for all panels, outside them
    (the colours are the same in every panel), so no legend covers a point."""
    with style():
        fig, axes = _grid(len(regimes))
        pal = _policy_colors(summary["policy"])
        for ax, reg in zip(axes, regimes):
            s = summary[summary["regime"] == reg].reset_index(drop=True)
            ys = []
            for i, row in s.iterrows():
                x, y = row[f"{LOSS}_mean"], row[f"{SE}_mean"] * 100
                if not (math.isfinite(x) and math.isfinite(y)):
                    continue
                lo, hi = row[f"{SE}_ci_low"] * 100, row[f"{SE}_ci_high"] * 100
                ys += [y, lo, hi]
                ax.errorbar(
                    [x],
                    [y],
                    xerr=_err([x], [row[f"{LOSS}_ci_low"]], [row[f"{LOSS}_ci_high"]]),
                    yerr=_err([y], [lo], [hi]),
                    fmt=MARKERS[i % len(MARKERS)],
                    color=pal[row["policy"]],
                    capsize=3,
                    label=row["policy"],
                )
            flat_panel(ax, ys, "sync-excess", " pts")
            ax.set_title(reg)
            ax.set_xlabel("modelled final loss (lower = more training progress)")
            ax.set_ylabel("sync-excess SLO violation (pts)")
        handles, names = {}, []
        for ax in axes:
            for h, n in zip(*ax.get_legend_handles_labels()):
                if n not in handles:
                    handles[n] = h
                    names.append(n)
        if names:  # a sweep whose runs all failed has no point to name
            fig.legend(
                [handles[n] for n in names],
                names,
                loc="lower center",
                ncol=min(len(names), 5),
                fontsize=8,
                frameon=False,
                bbox_to_anchor=(0.5, -0.02),
            )
        fig.tight_layout(rect=(0, 0.06 + 0.02 * math.ceil(len(names) / 5), 1, 0.96))
        fig.suptitle("Serving cost of merges vs training progress, per policy (mean, CI)")
        _save(fig, path, rect=None)
