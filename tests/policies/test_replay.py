"""The `replay` policy and `merge.phases`: merges at given times, as the testbed replayed schedules.

A testbed-like trainer (one island, 0.05-s steps, no jitter) merges at the first step boundary at or
after each scheduled start; Stage 12's schedules replay exactly (the starts of docs/sources.md, testbed 3.6,
spelled out here, not recomputed); a harness schedule wraps mod its trace length D; a coordinator
file gives the same merges as the schedule it was written from; `phases: []` merges are instantaneous.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from wadiloco.models.errors import InputError
from wadiloco.models.policies import make_policy
from wadiloco.models.policies.base import PolicyContext
from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.testbed.harness import TRACE_LENGTHS, run_harness, write_events
from wadiloco.sim.fleet import simulate

STEP = 0.05
BASE = {
    "name": "replay",
    "horizon_s": 600,
    "drain_s": 10,
    "fleet": {"islands": 1, "hosts_per_island": 1, "sidecars_per_host": 1},
    "engine": {"host_overhead_s": 0.0},
    "training": {"step_time_s": STEP, "step_jitter": 0.0},
    "merge": {"phases": []},
    "workload": {"kind": "normal", "load": 0.2},
    "policy": {"name": "replay"},
}
# docs/sources.md, testbed 3.6, as printed there
CALIBRATED = [37.5, 112.0, 187.5, 270.0, 337.5, 412.5, 472.0, 562.5]
RANDOM_23_0 = [115.445, 236.974, 271.791, 345.215, 405.158, 477.354, 525.132, 559.76]
RANDOM_41_2 = [42.168, 64.275, 91.626, 123.98, 151.415, 202.758, 301.178, 381.781]


def _sc(params: dict, horizon: float = 600.0, **patch):
    d = copy.deepcopy(BASE)
    d["policy"]["params"] = params
    d["horizon_s"] = horizon
    d.update(patch)
    return scenario_from_dict(d)


def _lands_on_first_step_at_or_after(res, starts):
    """Each merge decided at the first 0.05-s boundary at or after its start (1 us of clock drift)."""
    got = np.array([m.decided_at for m in res.merges])
    assert len(got) == len(starts)
    starts = np.asarray(starts)
    assert np.all(got >= starts - 1e-6)
    assert np.all(got - STEP < starts - 1e-6)  # the boundary before came before the start
    k = np.round(got / STEP)
    np.testing.assert_allclose(got, k * STEP, rtol=0, atol=1e-6)  # on the step grid


def test_merges_at_the_first_step_at_or_after_each_start():
    starts = [0.01, 3.0, 3.01, 10.049, 17.5, 40.0]
    res = simulate(_sc({"starts": starts, "repeat": False}, horizon=60), 0, check=True)
    # 3.0 merges at the boundary at 3.0 (to float drift), 3.01 at the next one, 3.05
    _lands_on_first_step_at_or_after(res, starts)
    for m in res.merges:
        assert m.decided_at == m.start == m.end and m.phases == {}  # phases: [] is instantaneous
    assert res.summary["merge_duration_mean_s"] == 0.0
    assert set(res.summary["merge_phase_mean_s"].values()) == {0.0}


def test_starts_between_two_boundaries_share_one_merge():
    res = simulate(_sc({"starts": [5.001, 5.02, 5.049, 9.0], "repeat": False}, horizon=20), 0)
    assert [round(m.decided_at, 6) for m in res.merges] == [5.05, 9.0]


@pytest.mark.parametrize(
    "params,expected",
    [
        ({"schedule": "stage12_calibrated_replay"}, CALIBRATED),
        ({"schedule": "stage12_random_matched"}, RANDOM_23_0),
    ],
)
def test_stage12_schedules_replay_exactly(params, expected):
    res = simulate(_sc(params), 23, check=True)
    _lands_on_first_step_at_or_after(res, expected)
    pol = make_policy("replay", params, PolicyContext(128, 512, 23))
    assert list(pol.starts) == expected and pol.duration == 600.0


def test_stage12_random_matched_follows_the_draw():
    res = simulate(_sc({"schedule": "stage12_random_matched"}), 41, draw=2)
    _lands_on_first_step_at_or_after(res, RANDOM_41_2)


def test_harness_schedule_wraps_mod_its_trace_length():
    params = {"schedule": "harness", "harness_policy": "fixed_h_256"}
    pol = make_policy("replay", params, PolicyContext(128, 512, 23))
    d = TRACE_LENGTHS["fixed_h_256"][0]  # seed 23: the fitted harness run has the artifact's D
    assert pol.duration == pytest.approx(d, abs=1e-3) and len(pol.starts) == 14
    wrapped = [s + r * pol.duration for r in range(3) for s in pol.starts if s + r * pol.duration < 600.0]
    assert pol.planned(600.0) == pytest.approx(sorted(wrapped), abs=1e-9)
    res = simulate(_sc(params), 23, check=True)
    assert len(res.merges) == len(wrapped) == 14 + sum(s < 600.0 - pol.duration for s in pol.starts)
    _lands_on_first_step_at_or_after(res, sorted(wrapped))
    # no repeat: the trace is cut at its end, as a trace longer than the horizon would be
    once = simulate(_sc({**params, "repeat": False}), 23)
    assert len(once.merges) == 14


def test_a_coordinator_log_replays_like_the_schedule_it_records(tmp_path):
    run = run_harness("wa_diloco", 29)
    write_events(tmp_path / "coordinator.jsonl", run.events)
    (tmp_path / "starts.txt").write_text("".join(f"{s}\n" for s in run.merge_times))
    d = copy.deepcopy(BASE)
    d["policy"]["params"] = {"file": "coordinator.jsonl"}
    from_log = simulate(scenario_from_dict(d, tmp_path / "s.yaml", tmp_path), 29, check=True)
    wrapped = [s + r * run.duration for r in range(3) for s in run.merge_times if s + r * run.duration < 600]
    _lands_on_first_step_at_or_after(from_log, wrapped)
    # a plain list of the same starts has D = last start + 8 instead of coordinator_stop's time
    d["policy"]["params"] = {"file": "starts.txt", "repeat_s": run.duration}
    from_list = simulate(scenario_from_dict(d, tmp_path / "s.yaml", tmp_path), 29)
    assert [m.decided_at for m in from_list.merges] == [m.decided_at for m in from_log.merges]


def test_number_of_merges_is_the_number_of_windows_starting_in_the_horizon():
    # starts 10 and 30, D = 50: windows start at 10, 30, 60, 80, ..., 280 in 300 s -> 12
    res = simulate(_sc({"starts": [10.0, 30.0], "repeat_s": 50.0}, horizon=300), 0, check=True)
    expected = [s + 50.0 * r for r in range(6) for s in (10.0, 30.0)]
    _lands_on_first_step_at_or_after(res, expected)
    shifted = simulate(_sc({"starts": [10.0, 30.0], "repeat_s": 50.0, "offset_s": -15.0}, horizon=300), 0)
    # 10 - 15 < 0 is dropped; the rest move 15 s earlier, which lets 310 - 15 = 295 in
    moved = [t - 15.0 for t in expected + [310.0] if 0 <= t - 15.0]
    _lands_on_first_step_at_or_after(shifted, moved)


def test_merge_phases_subset_runs_only_those_phases():
    d = {"islands": 2, "hosts_per_island": 1, "sidecars_per_host": 1}
    res = simulate(
        _sc({"starts": [5.0, 40.0], "repeat": False}, horizon=80, fleet=d, merge={"phases": ["allreduce"]}), 0
    )
    assert len(res.merges) == 2
    for m in res.merges:
        assert list(m.phases) == ["allreduce"] and m.end > m.start
    means = res.summary["merge_phase_mean_s"]
    assert means["allreduce"] > 0 and means["stage"] == means["outer"] == means["ckpt"] == 0.0


def test_an_empty_schedule_never_merges():
    assert simulate(_sc({}, horizon=30), 0).summary["merges"] == 0


@pytest.mark.parametrize(
    "params",
    [
        {"starts": [1.0], "schedule": "stage12_calibrated_replay"},
        {"schedule": "harness"},
        {"harness_policy": "wa_diloco"},
        {"schedule": "harness", "harness_policy": "nope"},
        {"file": "no_such_schedule.txt"},
        {"starts": [-1.0]},
    ],
)
def test_bad_params_are_input_errors(params):
    with pytest.raises(InputError) as e:
        resolve(_sc({}), "replay", params)
    assert "policy.params" in str(e.value)


def test_harness_pressure_offset_moves_only_pressure_aware_schedules():
    def starts(policy: str, offset: float):
        params = {"schedule": "harness", "harness_policy": policy, "harness_pressure_offset_s": offset}
        return make_policy("replay", params, PolicyContext(128, 512, 23)).starts

    assert starts("fixed_h_512", 150.0) == starts("fixed_h_512", 0.0)  # blind to pressure
    assert (
        starts("pressure_gate", 0.0)
        == make_policy(
            "replay", {"schedule": "harness", "harness_policy": "pressure_gate"}, PolicyContext(128, 512, 23)
        ).starts
    )
    assert starts("pressure_gate", 150.0) != starts("pressure_gate", 0.0)
