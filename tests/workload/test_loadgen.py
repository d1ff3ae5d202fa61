"""The load generator's workload (models/workload/loadgen.py): constant stages send exactly rate x duration
requests with exponential gaps rescaled to the stage, prompts cycle in one shuffled order from 0 every stage,
a group's prompts share its system prompt's blocks, and a schedule past the horizon is refused."""

from __future__ import annotations

import numpy as np
import pytest

from wadiloco.models.errors import InputError
from wadiloco.models.rng import stream
from wadiloco.models.workload.kinds import WORKLOADS, Context, parse_workload
from wadiloco.models.workload.loadgen import stage_sends

SPEC = {
    "kind": "loadgen",
    "data": {"system_prompt_tokens": 100, "question_tokens": 447, "output_tokens": 248, "extra_tokens": 2},
    "stages": [{"rate": 8.0, "duration_s": 600.0}, {"rate": 20.0, "duration_s": 600.0}],
    "stage_gap_s": 302.0,
}


def arrivals(spec=SPEC, seed=0, horizon=3000.0, n=1):
    p = parse_workload(spec, "x.yaml")
    return WORKLOADS["loadgen"].build(p, Context(n, horizon, lambda a, b: 1.0, seed, "x.yaml"))


def test_stages_send_rate_times_duration_ending_at_the_stage_end():
    a = arrivals()[0]
    assert len(a) == 8 * 600 + 20 * 600 and np.all(np.diff(a.t) >= 0)
    first, second = a.t[:4800], a.t[4800:]
    assert first[-1] == 600.0 and second[0] > 600.0 + 302.0 and second[-1] == 600.0 + 302.0 + 600.0
    assert (a.output == 248).all() and (a.prompt == 2 + 547).all()  # ratio 1, no spread: every prompt alike


def test_gaps_are_exponential_draws_rescaled_to_the_stage():
    # X = (duration - (last - first)) x rate is the first gap plus nothing, in units of the mean gap: Exp(1)
    xs = []
    for k in range(400):
        t = stage_sends(10.0, 60.0, stream(k, "arrivals", 0))
        assert len(t) == 600 and t[-1] == 60.0
        xs.append((60.0 - (t[-1] - t[0])) * 10.0)
    assert np.mean(xs) == pytest.approx(1.0, abs=0.15) and np.std(xs) == pytest.approx(1.0, abs=0.2)


def test_prompts_cycle_from_zero_every_stage_and_groups_share_their_system_blocks():
    a = arrivals()[0]
    h = a.hashes
    assert h[:100] == h[4800:4900]  # the same order again from the second stage's start
    assert h[100:200] == h[:100] and len(set(h[:100])) == 100  # 100 distinct prompts, cycled
    by_first = {}
    for hs in h[:100]:
        by_first.setdefault(hs[0], []).append(hs)
    assert len(by_first) == 10 and all(len(v) == 10 for v in by_first.values())  # 10 groups of 10
    shared = (1 + 100) // 16  # BOS and the system prompt, in whole blocks
    for group in by_first.values():
        assert len({g[:shared] for g in group}) == 1 and len({g[shared] for g in group}) == 10


def test_streams_are_per_seed_and_sidecar():
    a0, a1 = arrivals(n=2)
    assert not np.array_equal(a0.t, a1.t)
    again = arrivals(n=2)[1]
    assert np.array_equal(a1.t, again.t) and a1.hashes == again.hashes
    assert not np.array_equal(arrivals(seed=1)[0].t, a0.t)


def test_a_schedule_past_the_horizon_is_refused():
    with pytest.raises(InputError, match="workload.stages") as e:
        arrivals(horizon=1500.0)
    assert "x.yaml" in str(e.value)
    with pytest.raises(InputError, match="workload.stages.0: .* sends no request"):
        parse_workload({"kind": "loadgen", "stages": [{"rate": 0.001, "duration_s": 10}]}, "x.yaml")
