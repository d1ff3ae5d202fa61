"""Sweep figures (seaborn on the Agg backend), each written atomically as PNG.

- violation_rate.png: SLO violation rate per policy per regime, bootstrap CIs;
- envelope.png: each matched-random control's sync-excess over draws x seeds, its envelope, and
  every policy's mean sync-excess (with CI) marked;
- timeline_<regime>.png: one seed's request rate, queue length, violations and merge windows;
- tradeoff.png: sync-excess SLO violation against modelled final loss (training progress).
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from wadiloco.experiments.output import write_atomic  # noqa: E402
from wadiloco.experiments.protocol import LOSS, SE, VR  # noqa: E402
from wadiloco.models.metrics import SYNC_EXCESS  # noqa: E402

ROLE_COLORS = {"baseline": "#7f7f7f", "policy": "#1f77b4", "control": "#ff7f0e"}


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "regime"


def _save(fig, path: Path) -> None:
    fig.tight_layout(rect=(0, 0, 1, 0.96))  # room for the suptitle; no label runs into a neighbour
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def _grid(n: int, w: float = 5.2, h: float = 3.8):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _err(y, lo, hi):
    y, lo, hi = (np.asarray(v, dtype=float) for v in (y, lo, hi))
    lo = np.where(np.isfinite(lo), lo, y)
    hi = np.where(np.isfinite(hi), hi, y)
    return np.vstack([np.maximum(y - lo, 0), np.maximum(hi - y, 0)])


def violation_rate(summary: pd.DataFrame, regimes: list[str], path: Path) -> None:
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = _grid(len(regimes))
    for ax, reg in zip(axes, regimes):
        sub = summary[summary["regime"] == reg].reset_index(drop=True)
        y = sub[f"{VR}_mean"].astype(float) * 100
        sns.barplot(
            x=sub["policy"],
            y=y,
            hue=sub["role"],
            palette=ROLE_COLORS,
            dodge=False,
            ax=ax,
            errorbar=None,
            legend=False,
            order=list(sub["policy"]),
        )
        ax.errorbar(
            np.arange(len(sub)),
            y,
            yerr=_err(y, sub[f"{VR}_ci_low"] * 100, sub[f"{VR}_ci_high"] * 100),
            fmt="none",
            ecolor="black",
            capsize=3,
            lw=1,
        )
        ax.set_title(reg)
        ax.set_xlabel("")
        ax.set_ylabel("SLO violation rate (%)")
        ax.tick_params(axis="x", rotation=35)
        for lab in ax.get_xticklabels():
            lab.set_horizontalalignment("right")
    fig.suptitle("SLO violation rate per policy (mean over seeds, bootstrap CI)")
    _save(fig, path)


def envelope(summary: pd.DataFrame, runs: pd.DataFrame, regimes: list[str], path: Path) -> None:
    sns.set_theme(style="whitegrid", context="notebook")
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
        sns.stripplot(
            x=r["policy"],
            y=r[SYNC_EXCESS] * 100,
            order=order,
            color=ROLE_COLORS["control"],
            alpha=0.45,
            size=4,
            jitter=0.18,
            ax=ax,
        )
        for i, row in ctrl.iterrows():
            lo, hi = row["mr_envelope_low"] * 100, row["mr_envelope_high"] * 100
            if math.isfinite(lo) and math.isfinite(hi):
                if hi > lo:
                    ax.add_patch(
                        plt.Rectangle((i - 0.35, lo), 0.7, hi - lo, color=ROLE_COLORS["control"], alpha=0.18, lw=0)
                    )
                else:
                    ax.hlines(lo, i - 0.35, i + 0.35, color=ROLE_COLORS["control"], lw=4, alpha=0.4)
        # Each evaluated policy: its mean sync-excess with CI, beside the control spending the same
        # merge budget, or in a last column when no control does.
        markers = ["D", "o", "s", "^", "v", "P", "X", "*"]
        unpaired = [r["policy"] for _, r in pols.iterrows() if r["matched_control"] not in order]
        slot: dict[str, int] = {}
        for j, row in pols.iterrows():
            y = row[f"{SE}_mean"] * 100
            if not math.isfinite(y):
                continue
            if row["matched_control"] in order:
                k = slot[row["matched_control"]] = slot.get(row["matched_control"], -1) + 1
                x = order.index(row["matched_control"]) + 0.42 + 0.1 * k
            else:
                x = len(order) + 0.15 * (unpaired.index(row["policy"]) - (len(unpaired) - 1) / 2)
            ax.errorbar(
                [x],
                [y],
                yerr=_err([y], [row[f"{SE}_ci_low"] * 100], [row[f"{SE}_ci_high"] * 100]),
                fmt=markers[j % len(markers)],
                color=sns.color_palette("dark", 8)[j % 8],
                capsize=3,
                ms=7,
                label=row["policy"],
            )
        ticks = order + (["(no matched control)"] if unpaired else [])
        ax.set_xticks(range(len(ticks)), [t.replace("matched_random", "MR") for t in ticks])
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlim(-0.6, len(ticks) - 0.4 + (0.25 if not unpaired else 0))
        ax.set_xlabel("")
        ax.set_ylabel("sync-excess SLO violation (pts)")
        ax.tick_params(axis="x", rotation=15)
        if len(pols):
            ax.legend(fontsize=7, loc="best")
    fig.suptitle("Matched-random (MR) envelope (dots: draws x seeds; band: envelope) and policies (mean, CI)")
    _save(fig, path)


def timeline(timelines: dict[str, dict[str, Any]], roles: dict[str, str], regime: str, seed: int, path: Path) -> None:
    """`timelines`: policy label -> compact timeline of that policy's run on `seed` (draw 0)."""
    sns.set_theme(style="whitegrid", context="notebook")
    labels = [lab for lab in timelines if timelines[lab] and timelines[lab].get("t")]
    fig, axes = plt.subplots(
        4,
        1,
        figsize=(11, 9),
        sharex=True,
        gridspec_kw={"height_ratios": [1, 1.2, 1, 0.25 + 0.22 * max(len(labels), 1)]},
    )
    if not labels:
        axes[0].text(0.5, 0.5, "no timeline stored", ha="center", transform=axes[0].transAxes)
        _save(fig, path)
        return
    pal = dict(zip(labels, sns.color_palette("tab10", len(labels))))
    first = timelines[labels[0]]
    t = np.asarray(first["t"], dtype=float)
    bin_s = float(first.get("bin_s") or 1.0)
    sns.lineplot(x=t, y=np.asarray(first["arrivals"], dtype=float) / bin_s, ax=axes[0], color="black", lw=0.9)
    axes[0].set_ylabel("requests/s\n(fleet)")
    for lab in labels:
        tl = timelines[lab]
        tt = np.asarray(tl["t"], dtype=float)
        axes[1].plot(tt, np.asarray(tl["queue"], dtype=float), lw=0.9, color=pal[lab], label=lab)
        axes[2].plot(tt, np.asarray(tl["violations"], dtype=float) / bin_s, lw=0.9, color=pal[lab])
    axes[1].set_ylabel("queued\nrequests")
    axes[1].legend(fontsize=7, ncol=3, loc="upper right")
    axes[2].set_ylabel("SLO violations/s\n(by arrival)")
    for i, lab in enumerate(labels):
        spans = [(a, b - a) for a, b in timelines[lab].get("merges", []) if a is not None and b is not None]
        axes[3].broken_barh(spans, (i - 0.35, 0.7), color=pal[lab])
        for a, _ in spans:
            for ax in axes[:3]:
                ax.axvline(a, color=pal[lab], lw=0.4, alpha=0.35)
    axes[3].set_yticks(range(len(labels)), labels, fontsize=7)
    axes[3].set_ylim(-0.6, len(labels) - 0.4)
    axes[3].set_ylabel("merges")
    axes[3].set_xlabel("simulated time (s)")
    fig.suptitle(f"{regime}, seed {seed}: request rate, queue, violations and merge windows")
    _save(fig, path)


def tradeoff(summary: pd.DataFrame, regimes: list[str], path: Path) -> None:
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = _grid(len(regimes))
    for ax, reg in zip(axes, regimes):
        s = summary[summary["regime"] == reg].reset_index(drop=True)
        pal = sns.color_palette("tab10", max(len(s), 1))
        for i, row in s.iterrows():
            x, y = row[f"{LOSS}_mean"], row[f"{SE}_mean"] * 100
            if not (math.isfinite(x) and math.isfinite(y)):
                continue
            ax.errorbar(
                [x],
                [y],
                xerr=_err([x], [row[f"{LOSS}_ci_low"]], [row[f"{LOSS}_ci_high"]]),
                yerr=_err([y], [row[f"{SE}_ci_low"] * 100], [row[f"{SE}_ci_high"] * 100]),
                fmt="o",
                color=pal[i],
                capsize=3,
                label=row["policy"],
            )
        ax.set_title(reg)
        ax.set_xlabel("modelled final loss (lower = more training progress)")
        ax.set_ylabel("sync-excess SLO violation (pts)")
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("Serving cost of merges vs training progress, per policy (mean, CI)")
    _save(fig, path)
