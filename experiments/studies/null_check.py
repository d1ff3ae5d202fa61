"""The placement test's null check on a sweep's own runs: each matched-random draw, taken as "the
policy", tested against the other draws of its control on the same seeds (R - 1 of them).

    python -m wadiloco.experiments.studies.null_check OUT_DIR [--alpha 0.05]

A draw is one more random placement by construction, so every such test is under its null, and
the share with p < alpha must be at most alpha, up to chance. The procedure the gate used before,
a two-sided Wilcoxon signed-rank test on one run minus the mean of the others whose direction is
read from the mean, runs on the same data for comparison ("declared better": p < alpha and a
negative mean difference). Tests of one (regime, control) share their data, so they are not
independent: the binomial range printed treats them as if they were and is a guide only. A test
whose seeds all tie is not counted (it cannot reject).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from wadiloco.experiments.stats import paired_wilcoxon, placement_test

COLUMNS = ["regime", "control", "tests", "tested", "placement_rejections", "wilcoxon_rejections"]


def _matrix(g: pd.DataFrame, col: str) -> np.ndarray:
    """seeds x draws of `col` (NaN where a run is missing)."""
    return g.pivot_table(index="seed", columns="draw", values=col, aggfunc="first").to_numpy(dtype=float)


def check_control(g: pd.DataFrame, alpha: float) -> dict:
    """Every draw of one control as the policy against the rest: how many tests reject at alpha."""
    rate, se = _matrix(g, "slo_violation_rate"), _matrix(g, "sync_excess")
    out = {"tests": 0, "tested": 0, "placement_rejections": 0, "wilcoxon_rejections": 0}
    for d in range(rate.shape[1]):
        rest = np.delete(np.arange(rate.shape[1]), d)
        pt = placement_test(rate[:, d], rate[:, rest], alternative="less")
        diff = se[:, d] - np.nanmean(se[:, rest], axis=1)
        pw, _ = paired_wilcoxon(diff)
        out["tests"] += 1
        if pt.n_informative == 0:
            continue
        out["tested"] += 1
        out["placement_rejections"] += int(pt.p < alpha)
        out["wilcoxon_rejections"] += int(pw < alpha and np.nanmean(diff) < 0)
    return out


def null_check(runs: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per (regime, matched-random control) with at least two draws."""
    ctl = runs[(runs["role"] == "control") & (runs["status"] == "ok")]
    rows = []
    for (regime, label), g in ctl.groupby(["regime", "policy"], sort=False):
        if g["draw"].nunique() >= 2:
            rows.append({"regime": regime, "control": label, **check_control(g, alpha)})
    return pd.DataFrame(rows, columns=COLUMNS)


def render(table: pd.DataFrame, alpha: float) -> str:
    from scipy import stats

    n = int(table["tested"].sum())
    lines = [table.to_markdown(index=False), ""]
    if n:
        hi = stats.binom.ppf(0.995, n, alpha)
        for what in ("placement", "wilcoxon"):
            k = int(table[f"{what}_rejections"].sum())
            lines.append(f"{what}: {k} of {n} tested draws rejected at alpha {alpha:g} ({k / n:.3f})")
        lines.append(f"99.5% binomial upper bound at alpha for {n} independent tests: {int(hi)} ({hi / n:.3f})")
    else:
        lines.append("no test had an informative seed")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m wadiloco.experiments.studies.null_check", description=__doc__.split("\n")[0]
    )
    ap.add_argument("out_dir", help="a sweep's output folder (with runs.csv)")
    ap.add_argument("--alpha", type=float, default=0.05)
    args = ap.parse_args(argv)
    p = Path(args.out_dir) / "runs.csv"
    if not p.is_file():
        sys.stderr.write(f"error: {p}: no runs.csv (run a sweep with matched-random draws first)\n")
        return 2
    sys.stdout.write(render(null_check(pd.read_csv(p), args.alpha), args.alpha))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
