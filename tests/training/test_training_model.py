"""The training-progress heuristic orders outcomes the way DiLoCo's results do."""

from __future__ import annotations

import math

import pytest

from wadiloco.models.training.progress import PENALTY_PER_EFOLD, ProgressModel, chinchilla_loss, interval_penalty


def _run(interval: int, steps: int = 1200) -> float:
    pm = ProgressModel(1e9, 524288.0, 4, 1e9)
    done = 0
    while interval and done + interval <= steps:
        pm.record_merge(interval)
        done += interval
    return pm.final_loss(steps - done)


def test_merging_beats_never_merging():
    assert _run(256) < _run(0)


def test_longer_intervals_cost_a_little():
    # +3% perplexity from H=50 to H=1000 (DiLoCo) is the calibration of the penalty
    assert interval_penalty(1000) - interval_penalty(50) == pytest.approx(math.log(1.03))
    assert _run(128, 1024) < _run(512, 1024)
    assert _run(512, 1024) - _run(128, 1024) == pytest.approx(PENALTY_PER_EFOLD * math.log(4), rel=1e-9)


def test_loss_falls_with_tokens_and_dloss_is_positive():
    assert chinchilla_loss(1e9, 2e9) < chinchilla_loss(1e9, 1e9)
    pm = ProgressModel(1e9, 524288.0, 4, 1e9)
    assert pm.dloss_if_merged(100) > pm.dloss_if_merged(10) > 0
