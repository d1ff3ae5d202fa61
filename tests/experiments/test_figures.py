"""Figures drawn from summaries that carry no finite value: a sweep whose every run failed still
gets its report (it is how the user learns what failed), so no figure may assume a point exists."""

from __future__ import annotations

import math

import pandas as pd

from wadiloco.experiments import figures as F


def _empty_summary(regimes: list[str]) -> pd.DataFrame:
    cols = [f"{F.LOSS}_{k}" for k in ("mean", "ci_low", "ci_high")] + [
        f"{F.SE}_{k}" for k in ("mean", "ci_low", "ci_high")
    ]
    rows = [{"regime": r, "policy": p, **{c: math.nan for c in cols}} for r in regimes for p in ("no_sync", "fixed")]
    return pd.DataFrame(rows)


def test_tradeoff_without_a_finite_point_still_draws(tmp_path):
    path = tmp_path / "tradeoff.png"
    F.tradeoff(_empty_summary(["normal", "bursty"]), ["normal", "bursty"], path)
    assert path.read_bytes()[:4] == b"\x89PNG"
