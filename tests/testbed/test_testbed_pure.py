"""The testbed twin's pure building blocks (wadiloco.models.testbed): prompt sets, exact timetables,
Stage 12's generated schedules, and the simulated DiLoCo stress harness fitted to 3.5's traces.

Facts checked here are the paper's testbed's (docs/sources.md, testbed sections; numbers in the comments).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from wadiloco.models import timetables as tt
from wadiloco.models.errors import InputError
from wadiloco.models.testbed import harness_policies as hp
from wadiloco.models.testbed import pressure as tp
from wadiloco.models.testbed import prompts, stage12
from wadiloco.models.testbed.harness import (
    BOUNDARY_S,
    HARNESS_POLICIES,
    MERGE_COUNTS,
    REFERENCE_STEP_S,
    SEEDS,
    TRACE_LENGTHS,
    HarnessParams,
    TrainingSidecar,
    run_harness,
    write_events,
)
from wadiloco.models.testbed.harness_fit import TOLERANCE_S, fit_step_time, fit_table

# ---------------------------------------------------------------------------------------------
# prompts (2.3)


def test_prompt_characters_reproduce_the_artifacts_exact_lengths():
    assert prompts.PROMPT_SETS["mixed"].chars == (78, 311, 1397, 2201)
    assert prompts.PROMPT_SETS["long"].chars == (2417, 2393, 2273, 2201)
    short = prompts.PROMPT_SETS["short"].chars
    assert all(69 <= c <= 78 for c in short) and min(short) == 69 and max(short) == 78


def test_prompt_token_estimates():
    assert prompts.PROMPT_SETS["short"].tokens == (13, 13, 13, 13)
    assert prompts.PROMPT_SETS["mixed"].tokens == (13, 50, 250, 400)
    long = prompts.PROMPT_SETS["long"].tokens
    assert long == (439, 435, 413, 400)  # 2417 / 2393 / 2273 / 2201 chars x 400 / 2201
    assert all(400 <= x <= 440 for x in long)
    for ps in prompts.PROMPT_SETS.values():
        assert ps.source  # every value says where it comes from


def test_batches_advance_the_global_index_and_c1_takes_turns():
    seen, index = [], 0
    for _ in range(8):
        lengths, index = prompts.prompt_batch("mixed", index, 1)
        seen.append(int(lengths[0]))
    assert seen == [13, 50, 250, 400] * 2 and index == 8
    # c = 8: each type exactly twice, and every batch of a multiple-of-4 size is the same
    a, nxt = prompts.prompt_batch("mixed", 0, 8)
    b, _ = prompts.prompt_batch("mixed", nxt, 8)
    assert sorted(a.tolist()) == [13, 13, 50, 50, 250, 250, 400, 400] and (a == b).all()
    # c = 12 after a c = 4 batch: still slot 0 first; after 3 requests, slot 3 first
    assert prompts.prompt_batch("long", 4, 12)[0][0] == 439
    assert prompts.prompt_batch("long", 3, 2)[0].tolist() == [400, 439]


def test_output_lengths_fixed_and_the_0p5b_baseline_total():
    assert prompts.output_batch(128, 5, 12).tolist() == [128] * 12
    # 0.5B baseline: 12740 requests at c = 1 give 375830 output tokens (2.3, derived)
    total, index = 0, 0
    for _ in range(12740):
        total += int(prompts.output_batch(prompts.BASELINE_0P5B_OUTPUT, index, 1).sum())
        index += 1
    assert total == 375830
    with pytest.raises(ValueError):
        prompts.output_batch([32, 32, 22], 0, 4)
    with pytest.raises(ValueError):
        prompts.output_batch(0, 0, 4)


# ---------------------------------------------------------------------------------------------
# timetables (3.2, 3.3, 3.4, 2.4)


def _interval_member(timetable, t):
    iv = np.asarray(timetable.intervals).reshape(-1, 2)
    return ((t[:, None] >= iv[:, 0]) & (t[:, None] <= iv[:, 1])).any(axis=1)


def test_intervals_are_sorted_merged_clipped_and_agree_with_the_rule():
    rng = np.random.default_rng(7)
    tables = [
        tt.periodic(37, 8, horizon=1800),
        tp.pressure(90, horizon=1800),
        tp.pressure(300, horizon=1800, threshold=0.45),
        tt.bursty(120, 30, 7.5, horizon=600),
        tt.windows([1.0, 5.0, 100.0, 300.0], duration=350.0, horizon=600),
        tp.pressure(90, horizon=1800) | tt.periodic(37, 8, horizon=1800),
    ]
    for table in tables:
        iv = table.intervals
        assert all(0 <= a <= b <= table.horizon for a, b in iv)
        assert all(b1 < a2 for (_, b1), (a2, _) in zip(iv, iv[1:]))  # sorted, merged (no touching)
        t = rng.uniform(0, table.horizon, 50_000)
        assert (table.active(t) == _interval_member(table, t)).all()
        hits = table.active(t).mean()
        assert abs(hits - table.fraction()) < 0.01


def test_periodic_is_stage10s_inclusive_rule():
    sync = tt.periodic(37, 8, horizon=1800)
    assert sync.active(8.0) and sync.active(37.0) and sync.active(45.0)
    assert not sync.active(8.000001) and not sync.active(36.999)
    assert sync.active(np.array([0.0, 8.0, 9.0])).tolist() == [True, True, False]
    assert tt.periodic(37, 8, horizon=37 * 100).overlap(0, 3700) == pytest.approx(800 + 0)
    assert not tt.periodic(37, 8, inclusive=False, horizon=100).active(8.0)


def test_pressure_schedule_matches_the_fact_sheet():
    high = tp.pressure(90, horizon=360)
    (a, b), *_ = high.intervals
    assert a == pytest.approx(4.868, abs=5e-4) and b == pytest.approx(40.132, abs=5e-4)
    assert high.intervals[-1] == (270.0, 360.0)
    assert high.fraction() == pytest.approx(0.5439, abs=5e-5)
    # network >= 0.6 exactly at the interval's ends
    net, inf, ckpt = tp.pressure_values(np.array([a, b]), 90)
    assert net == pytest.approx([0.6, 0.6]) and (inf < 0.6).all() and (ckpt == 0).all()


def test_pressure_values_against_the_formulas():
    for t in (0.0, 12.3, 89.9, 271.0, 1000.0):
        phase = (math.sin(2 * math.pi * t / 90) + 1) / 2
        expect = (0.2 + 0.6 * phase, 0.1 + 0.8 * max(0.0, phase - 0.35) / 0.65, 0.8 if int(t // 90) % 4 == 3 else 0.0)
        assert [float(x) for x in tp.pressure_values(t, 90)] == pytest.approx(expect)
    t = np.linspace(0, 1800, 10_001)
    assert ((tp.max_pressure(t, 90) >= 0.6) == tp.pressure(90, horizon=1800).active(t)).all()


def test_both_mode_union_coverage():
    """3.3: "about 64.2%". Exactly from t = 0 over 1800 s it is 64.61%; 64.2% is the long-run share
    (period lcm(360, 37) = 13320 s: 64.25%) and the share of the serving span after ~22 s of init."""
    union = tp.pressure(90, horizon=1800) | tt.periodic(37, 8, horizon=1800)
    assert union.fraction() == pytest.approx(0.6461, abs=1e-4)
    assert union.overlap(22.0, 1800.0) / 1778.0 == pytest.approx(0.642, abs=5e-4)
    long_run = tp.pressure(90, horizon=13320) | tt.periodic(37, 8, horizon=13320)
    assert long_run.fraction() == pytest.approx(0.6425, abs=1e-4)
    assert tt.periodic(37, 8, horizon=13320).fraction() == pytest.approx(8 / 37)


def test_replayed_windows_are_inclusive_and_wrap_at_d():
    win = tt.windows([10.0, 100.0], horizon=600)  # D = 108: the trace replays from t = 108
    assert win.active(10.0) and win.active(18.0) and not win.active(18.001) and not win.active(9.999)
    assert win.active(108.0 + 10.0) and win.active(108.0 + 107.999) and not win.active(108.0 + 50.0)
    assert not win.active(216.0)  # t mod D = 0: the closed interval [208, 216] ends on an open point
    assert win.active(5 * 108.0 + 15.0) and not win.active(600.5)
    assert win.measure() == pytest.approx(sum(b - a for a, b in win.intervals))
    # a trace longer than the horizon is cut; one with D <= 8 s never wraps
    long = tt.windows([10.0, 650.0], horizon=600)
    assert not long.active(650.0) and long.intervals == ((10.0, 18.0),)
    short = tt.windows([0.0], window=8.0, duration=8.0, horizon=600)
    assert short.active(8.0) and not short.active(16.0)
    assert not tt.windows([], horizon=600).active(5.0) and tt.windows([], horizon=600).intervals == ()


def test_bursty_is_strict_and_sets_concurrency_and_labels():
    busy = tt.bursty(120, 30, 0, horizon=600)
    assert busy.active(29.9) and not busy.active(30.0) and busy.active(120.0) and busy.active(0.0)
    shifted = tt.bursty(120, 30, 100, horizon=600)  # (t + 100) mod 120 < 30: t in [20, 50)
    assert shifted.active(20.0) and not shifted.active(50.0) and not shifted.active(19.99)
    t = np.array([0.0, 29.9, 30.0, 125.0])
    flags = busy.active(t)
    assert tp.bursty_concurrency(flags).tolist() == [12, 12, 4, 12]
    net, inf, ckpt = tp.bursty_labels(flags)
    assert net.tolist() == [0.7, 0.7, 0.2, 0.7] and inf.tolist() == [0.95, 0.95, 0.08, 0.95]
    assert (np.maximum.reduce([net, inf, ckpt]) >= tp.HIGH_PRESSURE).tolist() == flags.tolist()


def test_sync_trace_files(tmp_path):
    log = tmp_path / "coordinator.jsonl"
    records = [
        {"ts_ms": 1000, "event": "coordinator_start"},
        {"ts_ms": 5000, "event": "control_cycle"},
        {"ts_ms": 11000, "event": "merged"},
        {"ts_ms": 51500, "event": "merged"},
        {"ts_ms": 70000, "event": "coordinator_stop"},
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    trace = tt.load_trace(log)
    assert trace.starts == (10.0, 50.5) and trace.duration == 69.0
    records[-1]["ts_ms"] = 55000  # stop before the last window ends: D = last start + 8
    log.write_text("\n".join(json.dumps(r) for r in records))
    assert tt.load_trace(log).duration == 58.5
    numbers = tmp_path / "starts.txt"
    numbers.write_text("37.5\n\n112.0\n")
    assert tt.load_trace(numbers) == tt.WindowTrace((37.5, 112.0), 120.0)
    assert tt.windows_from_file(numbers, horizon=600).active(120.0 + 37.5)


@pytest.mark.parametrize(
    "content, where",
    [
        ('{"ts_ms": 0, "event": "coordinator_start"}\n{"ts_ms": "x", "event": "merged"}\n', "line 2"),
        ('{"ts_ms": 0, "event": "coordinator_start"}\n{not json\n', "line 2"),
        ('{"ts_ms": 0, "event": "merged"}\n', ""),
        ("12.5\nabc\n", "line 2"),
        ("12.5\n-3\n", "line 2"),
    ],
)
def test_bad_sync_files_name_the_file_and_line(tmp_path, content, where):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError) as err:
        tt.load_trace(path)
    assert str(path) in str(err.value) and where in str(err.value)


# ---------------------------------------------------------------------------------------------
# Stage 12's generated schedules (3.6)

RANDOM_TABLE = {
    (23, 0): (115.445, 236.974, 271.791, 345.215, 405.158, 477.354, 525.132, 559.76),
    (23, 1): (19.172, 91.863, 156.549, 188.326, 245.272, 286.549, 441.805, 544.568),
    (23, 2): (44.918, 219.784, 286.934, 334.179, 387.198, 432.375, 510.773, 559.857),
    (23, 3): (4.846, 45.498, 71.589, 157.565, 194.25, 261.561, 510.207, 564.179),
    (23, 4): (36.589, 102.677, 210.005, 391.118, 455.384, 487.194, 509.817, 586.788),
    (29, 0): (19.759, 58.835, 179.575, 228.739, 359.611, 428.684, 468.439, 567.819),
    (29, 1): (43.577, 82.882, 123.799, 143.38, 202.564, 389.283, 428.609, 562.615),
    (29, 2): (22.968, 152.223, 316.797, 358.111, 407.46, 491.343, 557.825, 589.797),
    (29, 3): (7.76, 154.944, 184.092, 208.297, 276.777, 358.966, 464.157, 533.483),
    (29, 4): (37.909, 106.584, 136.042, 207.373, 317.632, 396.867, 534.218, 576.535),
    (31, 0): (14.791, 113.553, 141.779, 215.152, 287.386, 332.009, 446.114, 487.498),
    (31, 1): (84.559, 209.493, 259.687, 323.083, 358.16, 395.453, 422.292, 447.717),
    (31, 2): (96.399, 140.437, 275.182, 293.731, 357.474, 401.197, 468.975, 532.013),
    (31, 3): (112.621, 232.849, 266.78, 407.771, 442.047, 502.954, 525.672, 548.398),
    (31, 4): (141.515, 188.628, 217.444, 287.869, 312.447, 419.175, 506.746, 559.469),
    (37, 0): (79.633, 173.262, 192.901, 236.232, 264.187, 305.618, 344.307, 431.719),
    (37, 1): (64.223, 165.62, 284.554, 336.011, 399.419, 455.761, 483.78, 522.02),
    (37, 2): (41.072, 121.441, 299.618, 382.606, 417.031, 453.24, 481.112, 558.963),
    (37, 3): (86.446, 195.019, 280.866, 318.61, 396.077, 445.141, 531.506, 579.667),
    (37, 4): (1.88, 132.204, 158.778, 305.173, 352.457, 396.106, 431.511, 553.712),
    (41, 0): (63.369, 187.274, 251.555, 342.24, 380.163, 460.865, 495.258, 536.905),
    (41, 1): (77.662, 242.493, 269.536, 316.115, 342.727, 446.012, 483.597, 589.532),
    (41, 2): (42.168, 64.275, 91.626, 123.98, 151.415, 202.758, 301.178, 381.781),
    (41, 3): (5.687, 72.54, 103.506, 135.497, 203.387, 383.652, 523.969, 581.502),
    (41, 4): (171.487, 287.672, 326.62, 363.885, 398.421, 417.83, 479.895, 552.855),
}


def test_calibrated_replay_is_exact_and_avoids_every_burst():
    starts = stage12.calibrated_replay()
    assert starts == [37.5, 112.0, 187.5, 270.0, 337.5, 412.5, 472.0, 562.5]
    busy = tt.bursty(120, 30, 0, horizon=600)
    assert all(busy.overlap(s, s + 8) == 0 for s in starts)


@pytest.mark.parametrize("seed, draw", sorted(RANDOM_TABLE))
def test_random_matched_reproduces_the_table(seed, draw):
    starts = stage12.random_matched(seed, draw)
    assert starts == list(RANDOM_TABLE[seed, draw])
    assert all(0 <= s <= 592 for s in starts) and all(b - a >= 18 - 1e-3 for a, b in zip(starts, starts[1:]))


def test_random_matched_depends_on_seed_and_draw():
    assert stage12.random_matched(23, 0) != stage12.random_matched(23, 1) != stage12.random_matched(29, 0)
    assert stage12.random_matched(23, 0) == stage12.random_matched(23, 0)


# ---------------------------------------------------------------------------------------------
# the stress harness (3.5)


@pytest.fixture(scope="module")
def fits():
    return {(f.policy, f.seed): f for f in fit_table()}


def test_defaults_follow_from_the_trace_table():
    """Assumption 2 of harness.py: the boundary cost and the reference step time."""
    mean = {p: sum(d) / len(d) for p, d in TRACE_LENGTHS.items()}
    assert BOUNDARY_S == pytest.approx((mean["random_matched"] - mean["fixed_h_512"]) / 24, abs=5e-4)
    assert REFERENCE_STEP_S == pytest.approx((mean["fixed_h_512"] - 8 - 8 * BOUNDARY_S) / 4096, abs=5e-6)
    assert 8 + 3584 * REFERENCE_STEP_S + 14 * BOUNDARY_S == pytest.approx(mean["fixed_h_256"], abs=1.5)


def test_every_cell_reproduces_merge_count_and_trace_length(fits):
    assert len(fits) == 35
    for (policy, seed), fit in fits.items():
        run = fit.run
        assert len(run.merge_times) == MERGE_COUNTS[policy] == (14 if policy == "fixed_h_256" else 8)
        assert abs(run.duration - TRACE_LENGTHS[policy][SEEDS.index(seed)]) <= TOLERANCE_S, (policy, seed)
        assert run.duration == pytest.approx(run.merge_times[-1] + 8.0, abs=1e-9)  # tail 0: D = last + 8


def test_fits_are_plausible_and_offsets_move_only_when_they_must(fits):
    for (policy, _), fit in fits.items():
        assert 0.03 < fit.step_s < 0.15
        if not HARNESS_POLICIES[policy].reads_pressure:
            assert fit.pressure_offset_s == 0.0
    # pressure-blind cells have closed forms: D = 8 + cycles x (C x step + boundary)
    fit = fits["random_matched", 23]
    assert fit.cycles == 32 and fit.step_s == pytest.approx((611.300 - 8 - 32 * BOUNDARY_S) / 4096)
    fit = fits["fixed_h_256", 31]
    assert fit.cycles == 14 and fit.step_s == pytest.approx((412.008 - 8 - 14 * BOUNDARY_S) / 3584)


def test_corridor_and_event_log(fits):
    for (policy, _), fit in fits.items():
        cls, run = HARNESS_POLICIES[policy], fit.run
        assert all(cls.min_h <= s <= cls.max_h and s % cls.cycle_steps == 0 for s in run.merge_steps)
        assert sum(run.merge_steps) == run.cycles * cls.cycle_steps  # the run ends at its last merge
        assert run.cycles <= cls.max_cycles
        names = [e["event"] for e in run.events]
        assert names[0] == "coordinator_start" and names[-1] == "coordinator_stop"
        assert names.count("control_cycle") == run.cycles and names.count("merged") == len(run.merge_steps)
        ts = [e["ts_ms"] for e in run.events]
        assert ts == sorted(ts) and ts[0] == 0 and all(isinstance(x, int) for x in ts)


def test_event_log_round_trips_through_the_replay_loader(tmp_path, fits):
    run = fits["wa_diloco", 37].run
    trace = tt.load_trace(write_events(tmp_path / "coordinator.jsonl", run.events))
    assert trace.starts == run.merge_times and trace.duration == pytest.approx(622.979, abs=TOLERANCE_S)


def test_harness_is_deterministic_and_seeded():
    for policy in HARNESS_POLICIES:
        assert run_harness(policy, 23).events == run_harness(policy, 23).events
    p = HarnessParams(loss_drop_sd=0.005)  # early syncs happen at this noise, so draws matter
    seeds = {run_harness("wa_diloco", s, p).merge_steps for s in SEEDS}
    assert len(seeds) > 1
    assert run_harness("random_matched", 23).merge_steps == (512,) * 8  # 0.3^8 per cycle: forced


def test_online_policy_syncs_early_only_in_quiet_time(fits):
    """Stage 13's rule reads the bursty sidecar: an early (unforced) merge never follows a busy sample."""
    early = 0
    for seed in SEEDS:
        fit = fits["online_calibrated_wa", seed]
        p, sidecar = fit.run.params, TrainingSidecar("bursty", fit.run.params, 2000.0)
        t = 0.0
        for steps in fit.run.merge_steps:
            t_vote = t + steps * p.step_s + (steps // 128 - 1) * p.boundary_s
            if steps < 512:
                early += 1
                net, inf, _, cost = sidecar.read(t_vote)
                assert (net, inf) == tp.QUIET_LABELS[:2] and cost < 1.0
            t = t_vote + p.boundary_s
        assert t == pytest.approx(fit.run.merge_times[-1])
    assert early > 0


def test_sidecar_reads_the_last_published_value():
    p = HarnessParams(pressure_offset_s=2.0)
    mixed = TrainingSidecar("mixed", p, 1000.0)
    net, inf, ckpt, cost = mixed.read(77.9)  # sidecar time 79.9 -> published at 75
    assert [net, inf, ckpt] == pytest.approx([float(x) for x in tp.pressure_values(75.0, 300.0)]) and cost == 0.0
    busy = TrainingSidecar("bursty", p, 1000.0)
    assert busy.read(24.0) == (0.70, 0.95, 0.0, 5.0 / 8.0)  # published at 25: busy, [25, 33] is 5/8 busy
    assert busy.read(28.0) == (0.20, 0.08, 0.0, 0.0)  # published at 30: quiet, [30, 38] quiet


def _view(**kw):
    base = dict(
        cycle=3,
        round=1,
        steps_since_sync=384,
        tokens_since_sync=384 * 2048,
        staleness_s=54.0,
        network=0.2,
        inference=0.1,
        checkpoint=0.0,
        serving_sync_cost=0.0,
        loss_drop=np.array([0.01, -0.05]),
        uniform=np.array([0.7, 0.69]),
    )
    base.update(kw)
    return hp.CycleView(**base)


def test_hand_checked_decisions():
    view = _view()
    assert hp.FixedH256().votes(view).all() and hp.FixedH512().votes(view).all()
    assert hp.PressureGate().votes(_view(network=0.6)).all() and not hp.PressureGate().votes(_view(network=0.61)).any()
    assert hp.PressureGateMatched().votes(_view(inference=0.45)).all()
    assert not hp.PressureGateMatched().votes(_view(checkpoint=0.8)).any()
    assert hp.RandomMatched().votes(view).tolist() == [True, False]  # defers when u < 0.7
    # wa_diloco, learner 0: 0.5 x 0.2 + 0.5 x 0.786432 - (0.1 + 0.075 + 0 + 0.25 x 0.03) = 0.3107
    # learner 1: 0.5 x (-1) + 0.393216 - 0.1825 = -0.2893
    assert hp.WaDiloco().scores(view) == pytest.approx([0.310716, -0.289284], abs=1e-6)
    assert hp.WaDiloco().votes(view).tolist() == [True, False]
    online = hp.OnlineCalibratedWa()
    assert online.scores(_view(serving_sync_cost=0.25)) == pytest.approx([0.060716, -0.539284], abs=1e-6)
    assert not online.votes(_view(serving_sync_cost=0.35)).any()


def test_coordinator_corridor():
    gate = hp.PressureGate()
    assert not hp.coordinator_merges(gate, _view(steps_since_sync=0, network=0.2))
    assert hp.coordinator_merges(gate, _view(steps_since_sync=128, network=0.2))
    assert not hp.coordinator_merges(gate, _view(steps_since_sync=384, network=0.8))
    assert hp.coordinator_merges(gate, _view(steps_since_sync=512, network=0.8))  # forced
    wa = hp.WaDiloco()  # one dissenting learner blocks the merge (min_ready 8)
    assert not hp.coordinator_merges(wa, _view())
    assert hp.coordinator_merges(wa, _view(loss_drop=np.array([0.01, 0.0])))


def test_fit_fails_loudly_and_params_are_checked():
    with pytest.raises(ValueError, match="no self-consistent"):
        fit_step_time("fixed_h_512", 23, 50.0)
    with pytest.raises(ValueError):
        HarnessParams(step_s=0.0)
    with pytest.raises(ValueError):
        HarnessParams(pressure_offset_s=-1.0)
    shifted = fit_step_time("pressure_gate", 23, 288.387, replace(HarnessParams(), pressure_offset_s=150.0))
    assert abs(shifted.residual_s) <= TOLERANCE_S and shifted.pressure_offset_s >= 150.0
