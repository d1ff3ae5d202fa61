"""Workload kinds: determinism, rates against load x capacity, burst shape, token lengths, trace
replay (offset, scale, loop, spreading) and validation errors that name the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from wadiloco.models.errors import InputError
from wadiloco.models.workload import kinds as W
from wadiloco.models.workload.kinds import (
    WORKLOADS,
    Arrivals,
    Context,
    arrivals_hash,
    describe_workloads,
    generate_arrivals,
    parse_workload,
)

# every registered synthetic kind (a new one is covered without editing a list)
SYNTHETIC = sorted(k for k, e in WORKLOADS.items() if issubclass(e.params, W.SyntheticParams))
CAP = 10.0  # requests/s per sidecar


def cap(mean_prompt: float, mean_output: float) -> float:
    return CAP


def gen(spec: dict, n: int = 2, horizon: float = 600.0, seed: int = 7, base_dir=".", capacity=cap):
    return generate_arrivals(
        spec, n_sidecars=n, horizon_s=horizon, capacity_rps=capacity, seed=seed, base_dir=base_dir, file="scn.yaml"
    )


def poisson_tol(expected: float, k: float = 4.0) -> float:
    return k * math.sqrt(expected)


# ---------------------------------------------------------------------------------------------
# common properties of every synthetic kind


@pytest.mark.parametrize("kind", SYNTHETIC)
def test_shape_and_bounds(kind):
    arrs = gen({"kind": kind}, n=3, horizon=300)
    assert len(arrs) == 3
    for a in arrs:
        assert isinstance(a, Arrivals)
        assert a.t.dtype == np.float64 and a.prompt.dtype == np.int64 and a.output.dtype == np.int64
        assert len(a.t) == len(a.prompt) == len(a.output) > 0
        assert np.all(np.diff(a.t) >= 0) and a.t[0] >= 0 and a.t[-1] < 300
        assert a.prompt.min() >= 1 and a.prompt.max() <= 16384
        assert a.output.min() >= 1 and a.output.max() <= 4096
        with pytest.raises(ValueError):
            a.t[0] = -1.0  # shared across policy runs: read-only


@pytest.mark.parametrize("kind", SYNTHETIC)
def test_deterministic_per_seed_and_sidecar(kind):
    a, b = gen({"kind": kind}, n=3), gen({"kind": kind}, n=3)
    assert arrivals_hash(a) == arrivals_hash(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.t, y.t)
        np.testing.assert_array_equal(x.prompt, y.prompt)
    # sidecars draw from their own streams
    assert not np.array_equal(a[0].t[:50], a[1].t[:50])
    assert not np.array_equal(a[0].prompt[:50], a[1].prompt[:50])
    # another seed, another load
    assert arrivals_hash(gen({"kind": kind}, n=3, seed=8)) != arrivals_hash(a)
    # common random numbers: sidecar i's requests do not depend on the fleet size
    bigger = gen({"kind": kind}, n=5)
    for x, y in zip(a, bigger[:3]):
        np.testing.assert_array_equal(x.t, y.t)
        np.testing.assert_array_equal(x.output, y.output)


@pytest.mark.parametrize(
    "kind,load",
    [("normal", 0.5), ("pressure_heavy", 1.0), ("sustained_sync_heavy", 0.8), ("bursty", 0.6), ("normal", 2.5)],
)
def test_mean_rate_is_load_times_capacity(kind, load):
    horizon = 120.0 * 100  # whole bursty periods, so the bursty count is exactly Poisson too
    arrs = gen({"kind": kind, "load": load}, n=2, horizon=horizon)
    expected = load * CAP * horizon
    for a in arrs:
        assert abs(len(a) - expected) < poisson_tol(expected), (len(a), expected)


def test_defaults_per_kind():
    loads = {k: parse_workload({"kind": k}).load for k in SYNTHETIC}
    assert loads == {
        **{"normal": 0.5, "pressure_heavy": 1.0, "sustained_sync_heavy": 0.8},
        **{"bursty": 0.6, "aperiodic": 0.6, "diurnal": 0.5},
    }


def test_capacity_sees_clipped_token_means():
    seen = []

    def capacity(p, o):
        seen.append((p, o))
        return 2.0

    gen({"kind": "normal", "tokens": {"output": {"mean": 400, "median": 100, "max": 600}}}, capacity=capacity)
    ((p, o),) = set(seen)
    assert p == pytest.approx(1155, rel=1e-3)  # the 16384 clip barely matters for prompts
    # the output clip at 600 takes a large share of the tail off the mean of 400
    assert o < 330
    sample = W.OutputLengths(mean=400, median=100, max=600).sample(np.random.default_rng(0), 400_000)
    assert o == pytest.approx(sample.mean(), rel=0.005)


def test_bad_capacity_is_reported():
    with pytest.raises(ValueError, match="capacity_rps"):
        gen({"kind": "normal"}, capacity=lambda p, o: 0.0)


# ---------------------------------------------------------------------------------------------
# token lengths


def test_token_lengths_match_targets():
    (a,) = gen({"kind": "normal", "load": 1.0}, n=1, horizon=10_000)  # ~100k requests
    assert a.prompt.mean() == pytest.approx(1155, rel=0.01)
    assert np.median(a.prompt) == pytest.approx(1020, rel=0.02)
    assert a.output.mean() == pytest.approx(211, rel=0.02)
    assert np.median(a.output) == pytest.approx(129, rel=0.03)


@pytest.mark.parametrize(
    "mean,median,lo,hi",
    [(1155, 1020, 1, 16384), (211, 129, 1, 4096), (300, 100, 50, 400), (50, 50, 1, 100), (3, 2, 1, 10)],
)
def test_clipped_mean_analytic_matches_sampling(mean, median, lo, hi):
    d = W.PromptLengths(mean=mean, median=median, min=lo, max=hi)
    x = d.sample(np.random.default_rng(1), 300_000)
    assert x.min() >= lo and x.max() <= hi
    assert d.clipped_mean() == pytest.approx(x.mean(), rel=0.01, abs=0.02)


def test_custom_token_lengths():
    spec = {
        "kind": "normal",
        "load": 1.0,
        "tokens": {"prompt": {"mean": 100, "median": 80, "min": 10, "max": 500}, "output": {"mean": 20, "median": 20}},
    }
    (a,) = gen(spec, n=1, horizon=3000)
    assert a.prompt.min() >= 10 and a.prompt.max() <= 500
    assert a.prompt.mean() == pytest.approx(100, rel=0.03)
    assert set(a.output.tolist()) == {20}  # median == mean: fixed length


# ---------------------------------------------------------------------------------------------
# bursty and aperiodic


def _on_mask(t: np.ndarray, phase: float, period: float, on_fraction: float) -> np.ndarray:
    return (t - phase) % period < on_fraction * period


def test_bursty_on_off_ratio():
    spec = {
        "kind": "bursty",
        "load": 0.6,
        "period_s": 100.0,
        "on_fraction": 0.3,
        "off_rate_ratio": 0.2,
        "phase_s": 10.0,
    }
    horizon = 100.0 * 200
    arrs = gen(spec, n=2, horizon=horizon)
    on_level = 1 / (0.3 + 0.2 * 0.7)
    for a in arrs:
        on = _on_mask(a.t, 10.0, 100.0, 0.3)
        n_on, n_off = on.sum(), (~on).sum()
        rate_on, rate_off = n_on / (0.3 * horizon), n_off / (0.7 * horizon)
        assert rate_on == pytest.approx(0.6 * CAP * on_level, abs=poisson_tol(n_on) / (0.3 * horizon))
        # ratio: relative std of a ratio of Poisson counts is sqrt(1/n_on + 1/n_off)
        tol = 4 * 0.2 * math.sqrt(1 / n_on + 1 / n_off)
        assert rate_off / rate_on == pytest.approx(0.2, abs=tol)


def test_bursty_phase_is_fleet_wide_and_random_per_seed():
    p = parse_workload({"kind": "bursty"})
    edges, level = W.bursty(p, Context(n_sidecars=4, horizon_s=1200.0, capacity_rps=cap, seed=3, file="x"))
    assert np.sum(np.diff(edges) * level) / 1200.0 == pytest.approx(1.0)  # 10 whole periods
    # every sidecar's requests crowd into the same bursts: expected share 0.25 * 2.5 = 0.625
    for a in gen({"kind": "bursty"}, n=4, horizon=1200, seed=3):
        in_burst = level[np.searchsorted(edges, a.t, side="right") - 1] > 1
        assert in_burst.mean() > 0.55
    # with phase_s null the burst phase is drawn per seed
    starts = set()
    for seed in range(6):
        e, lvl = W.bursty(p, Context(1, 1200.0, cap, seed, "x"))
        starts.add(round(float(e[np.argmax(lvl > 1)]), 6))
    assert len(starts) == 6


def test_aperiodic_profile_mean_is_one_in_expectation():
    p = parse_workload({"kind": "aperiodic"})
    levels, at_zero = [], []
    for seed in range(400):
        edges, level = W.aperiodic(p, Context(1, 600.0, cap, seed, "x"))
        assert edges[0] == 0 and edges[-1] == 600.0 and np.all(np.diff(edges) > 0)
        assert set(np.round(level, 9)) <= {round(1 / (0.25 + 0.2 * 0.75), 9), round(0.2 / (0.25 + 0.2 * 0.75), 9)}
        levels.append(np.sum(np.diff(edges) * level) / 600.0)
        at_zero.append(level[0])
    for x in (np.array(levels), np.array(at_zero)):  # over the horizon, and already at t = 0
        assert x.mean() == pytest.approx(1.0, abs=4 * x.std() / math.sqrt(len(x)))
    assert np.std(levels) > 0.1  # bursts really are irregular at this horizon


def test_aperiodic_gaps_are_heavy_tailed():
    p = parse_workload({"kind": "aperiodic", "gap_mean_s": 60, "burst_mean_s": 10})
    edges, level = W.aperiodic(p, Context(1, 200_000.0, cap, 1, "x"))
    starts = edges[1:-1][level[1:] > level[:-1]]  # off -> on
    gaps = np.diff(starts)
    assert gaps.mean() == pytest.approx(60, rel=0.2)
    assert gaps.max() > 20 * gaps.mean()  # Pareto 1.5: a few enormous quiet spells
    assert np.median(gaps) < gaps.mean()


def test_aperiodic_rate_long_run():
    spec = {"kind": "aperiodic", "gap_shape": 3.0, "load": 0.6}
    arrs = gen(spec, n=1, horizon=50_000)
    expected = 0.6 * CAP * 50_000
    assert len(arrs[0]) == pytest.approx(expected, rel=0.05)


# ---------------------------------------------------------------------------------------------
# diurnal

DAY = 3600.0  # a short "day" keeps the counts small; the curve is in hours of the period either way


def _hourly_counts(a: Arrivals, days: int) -> np.ndarray:
    return np.histogram(a.t % DAY, bins=24, range=(0, DAY))[0] / days


@pytest.mark.parametrize(
    "extra",
    [{}, {"hourly": [1.0] * 8 + [4.0] * 8 + [2.0] * 8}, {"bursts": {"gap_mean_s": 300, "burst_mean_s": 30}}],
    ids=["sine", "hourly", "bursts"],
)
def test_diurnal_mean_rate_over_whole_periods_is_load(extra):
    days, load = 20, 0.8
    arrs = gen({"kind": "diurnal", "load": load, "period_s": DAY, **extra}, n=1, horizon=days * DAY)
    expected = load * CAP * days * DAY
    # the curve's steps are exact means, so whole periods hold exactly load x capacity in expectation;
    # bursts add their own variance (a burst ratio of 3: about 3x a Poisson count's)
    k = 4.0 if "bursts" not in extra else 40.0
    for a in arrs:
        assert abs(len(a) - expected) < poisson_tol(expected, k), (len(a), expected)


def test_diurnal_sine_follows_its_curve():
    days, ratio, peak = 20, 4.0, 15.0
    spec = {"kind": "diurnal", "load": 1.0, "period_s": DAY, "peak_hour": peak, "peak_to_trough": ratio}
    (a,) = gen({**spec, "start_hour": 6.0}, n=1, horizon=days * DAY)
    got = _hourly_counts(a, days)
    hours = np.arange(24) + 0.5 + 6.0  # the run starts at 06:00, so its hour h is the day's h + 6
    amp = (ratio - 1) / (ratio + 1)
    want = CAP * DAY / 24 * (1 + amp * np.cos(2 * np.pi * (hours - peak) / 24))
    assert np.all(np.abs(got - want) < 5 * np.sqrt(want / days) + 0.01 * want)
    assert np.argmax(got) == int(peak - 6.0) or np.argmax(got) == int(peak - 6.0) - 1
    assert got.max() / got.min() == pytest.approx(ratio, rel=0.15)  # hour means flatten the extremes a little


def test_diurnal_hourly_profile_steps_exactly():
    days, prof = 20, [1.0] * 6 + [5.0] * 6 + [2.0] * 12
    (a,) = gen({"kind": "diurnal", "load": 1.0, "period_s": DAY, "hourly": prof}, n=1, horizon=days * DAY)
    edges, level = W.diurnal(parse_workload({"kind": "diurnal", "period_s": DAY, "hourly": prof}),
                             Context(1, 2 * DAY, cap, 0, "x"))  # fmt: skip
    assert set(np.round(level, 9)) == {round(x / np.mean(prof), 9) for x in prof}
    want = CAP * DAY / 24 * np.asarray(prof) / np.mean(prof)
    got = _hourly_counts(a, days)
    assert np.all(np.abs(got - want) < 5 * np.sqrt(want / days))


def test_diurnal_curve_from_a_trace_is_its_binned_counts(tmp_path):
    times = np.concatenate([np.linspace(0, 99.9, 100), np.linspace(100, 199.9, 300)])  # 1/s, then 3/s
    path = _trace_file(tmp_path, np.append(times, 200.0))
    p = parse_workload({"kind": "diurnal", "trace": path.name, "trace_bins": 2, "period_s": DAY}, "s.yaml", tmp_path)
    np.testing.assert_allclose(p.slices(), [0.5, 1.5], rtol=0.02)
    edges, level = W.diurnal(p, Context(1, DAY, cap, 0, "x"))
    assert list(edges) == [0.0, DAY / 2, DAY] and level == pytest.approx([0.5, 1.5], rel=0.02)


def test_diurnal_bursts_are_fleet_wide_seeded_and_their_own_stream():
    spec = {"kind": "diurnal", "period_s": DAY, "bursts": {"gap_mean_s": 600, "burst_mean_s": 60, "ratio": 5}}
    p = parse_workload(spec)
    e1, l1 = W.diurnal(p, Context(1, DAY, cap, 3, "x"))
    e2, _ = W.diurnal(p, Context(4, DAY, cap, 3, "x"))
    np.testing.assert_array_equal(e1, e2)  # the same bursts whatever the fleet
    assert not np.array_equal(e1, W.diurnal(p, Context(1, DAY, cap, 4, "x"))[0])  # another seed, other bursts
    plain = W.diurnal(parse_workload({"kind": "diurnal", "period_s": DAY}), Context(1, DAY, cap, 3, "x"))
    assert set(plain[0]) <= set(e1)  # bursts cut the curve's steps, never move them
    on = l1 / plain[1][np.searchsorted(plain[0], (e1[:-1] + e1[1:]) / 2) - 1]  # the curve's step under each piece
    assert set(np.round(on, 6)) <= {round(x, 6) for x in W._on_off_levels(0.1, 0.2)}


def test_diurnal_arrivals_are_common_to_every_policy():
    """Common random numbers through the simulator: no_sync and fixed on one seed see the same requests."""
    from wadiloco.experiments.runner import run_one
    from wadiloco.models.spec.load import load_scenario, with_overrides

    sc = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "bursty.yaml")
    sc = with_overrides(sc, {"workload": {"kind": "diurnal", "period_s": 120.0, "bursts": {"gap_mean_s": 40,
                        "burst_mean_s": 10}}, "horizon_s": 60, "drain_s": 5, "fleet.hosts_per_island": 1,
                        "merge.h_min": 16, "merge.h_max": 32, "policy.params": {"H": 16}})  # fmt: skip
    a, b = run_one(sc, 2, "no_sync", {}), run_one(sc, 2, "fixed", {"H": 16})
    assert b.summary["merges"] >= 1
    assert a.summary["arrivals_hash"] == b.summary["arrivals_hash"]


@pytest.mark.parametrize(
    "extra,field,text",
    [
        ({"hourly": [1, 2], "trace": "t.jsonl"}, "workload", "not both"),
        ({"hourly": [0, 0]}, "workload", "positive sum"),
        ({"hourly": [1, -1]}, "workload", ">= 0"),
        ({"peak_hour": 24}, "workload.peak_hour", "less than 24"),
        ({"peak_to_trough": 0.5}, "workload.peak_to_trough", "greater than or equal to 1"),
        ({"bursts": {"gap_mean_s": 60, "burst_mean_s": 60}}, "workload.bursts", "burst_mean_s"),
        ({"bursts": {"ratio": 0.5}}, "workload.bursts.ratio", "greater than or equal to 1"),
        ({"trace": "no_such.csv"}, "workload.trace", "not found"),
    ],
)
def test_diurnal_errors_name_the_field(extra, field, text):
    with pytest.raises(InputError) as err:
        parse_workload({"kind": "diurnal", **extra}, "scn.yaml", ".")
    assert err.value.where == field and text in str(err.value), str(err.value)


# ---------------------------------------------------------------------------------------------
# trace replay


def _trace_file(folder: Path, times_s, name="t.jsonl") -> Path:
    """A Mooncake trace whose input_length is the row number + 1, so rows can be identified."""
    lines = [
        json.dumps({"timestamp": round(t * 1000, 3), "input_length": i + 1, "output_length": 1 + i % 7})
        for i, t in enumerate(times_s)
    ]
    p = folder / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.fixture
def trace100(tmp_path) -> Path:
    """100 requests, one every 2 s from t = 0 to t = 198."""
    return _trace_file(tmp_path, np.arange(100) * 2.0)


@pytest.mark.parametrize("spread", ["round_robin", "random", "hash"])
def test_spread_conserves_every_request_once(trace100, spread):
    spec = {"kind": "trace", "path": trace100.name, "spread": spread}
    arrs = gen(spec, n=3, horizon=1000, base_dir=trace100.parent)
    rows = np.sort(np.concatenate([a.prompt for a in arrs]))
    np.testing.assert_array_equal(rows, np.arange(1, 101))
    for a in arrs:
        assert np.all(np.diff(a.t) >= 0)
        np.testing.assert_allclose(a.t, (a.prompt - 1) * 2.0)  # each row keeps its own time
        np.testing.assert_array_equal(a.output, 1 + (a.prompt - 1) % 7)
    sizes = [len(a) for a in arrs]
    if spread == "round_robin":
        assert max(sizes) - min(sizes) <= 1
        np.testing.assert_array_equal(arrs[0].prompt[:3], [1, 4, 7])
    assert min(sizes) > 10  # every mode actually spreads


def test_spread_seed_dependence(trace100):
    base = {"kind": "trace", "path": str(trace100)}
    for spread, varies in (("round_robin", False), ("hash", False), ("random", True)):
        a = gen(base | {"spread": spread}, n=4, seed=1)
        b = gen(base | {"spread": spread}, n=4, seed=2)
        assert (arrivals_hash(a) != arrivals_hash(b)) == varies, spread


def test_hash_spread_keeps_a_row_on_one_sidecar_when_looping(trace100):
    spec = {"kind": "trace", "path": str(trace100), "spread": "hash", "loop": True}
    arrs = gen(spec, n=3, horizon=2000)
    owners = {}
    for i, a in enumerate(arrs):
        for row in set(a.prompt.tolist()):
            assert owners.setdefault(row, i) == i


def test_time_offset_and_rate_scale(trace100):
    base = {"kind": "trace", "path": str(trace100)}
    (plain,) = gen(base, n=1, horizon=1000)
    assert len(plain) == 100 and plain.t[-1] == pytest.approx(198)
    (off,) = gen(base | {"time_offset_s": 51.0}, n=1, horizon=1000)
    assert off.prompt[0] == 27 and off.t[0] == pytest.approx(1.0)  # row 26 at 52 s -> 1 s
    assert len(off) == 74
    (fast,) = gen(base | {"rate_scale": 4.0}, n=1, horizon=20.0)
    np.testing.assert_allclose(fast.t, np.arange(40) * 0.5)  # 4x compressed, cut at the horizon
    (slow,) = gen(base | {"rate_scale": 0.5}, n=1, horizon=100.0)
    assert len(slow) == 25


def test_loop_repeats_with_one_mean_gap_at_the_seam(trace100):
    spec = {"kind": "trace", "path": str(trace100), "loop": True}
    (a,) = gen(spec, n=1, horizon=1000)
    assert len(a) == 500
    np.testing.assert_allclose(a.t, np.arange(500) * 2.0)  # the seam keeps the 2 s cadence
    (b,) = gen(spec | {"loop": False}, n=1, horizon=1000)
    assert len(b) == 100


def test_trace_load_sets_per_sidecar_rate(trace100):
    seen = []

    def capacity(p, o):
        seen.append((p, o))
        return 5.0

    spec = {"kind": "trace", "path": str(trace100), "loop": True, "load": 0.4, "rate_scale": 123.0}
    arrs = gen(spec, n=4, horizon=5000, capacity=capacity)
    assert seen[0][0] == pytest.approx(50.5) and seen[0][1] == pytest.approx(np.mean(1 + np.arange(100) % 7))
    for a in arrs:
        assert len(a) / 5000 == pytest.approx(0.4 * 5.0, rel=0.01)


def test_real_azure_trace_replay(shared_dir):
    path = shared_dir / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    spec = {"kind": "trace", "path": str(path), "load": 0.5, "loop": True}
    arrs = gen(spec, n=8, horizon=7200)
    total = sum(len(a) for a in arrs)
    assert total / (8 * 7200) == pytest.approx(0.5 * CAP, rel=0.02)
    assert np.mean(np.concatenate([a.prompt for a in arrs])) == pytest.approx(1155, rel=0.02)


def test_trace_path_relative_to_scenario_folder(tmp_path):
    sub = tmp_path / "scenarios"
    sub.mkdir()
    _trace_file(tmp_path, [0.0, 1.0, 2.0], name="tiny.jsonl")
    p = parse_workload({"kind": "trace", "path": "../tiny.jsonl"}, "scenarios/x.yaml", sub)
    assert len(p.trace) == 3
    with pytest.raises(InputError) as err:
        parse_workload({"kind": "trace", "path": "tiny.jsonl"}, "scenarios/x.yaml", sub)
    assert err.value.where == "workload.path" and "x.yaml" in str(err.value) and "not found" in str(err.value)


def test_malformed_trace_reported_at_parse_time(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,10,5\n2023-11-16 18:15:40.0,1,1\n")
    with pytest.raises(InputError) as err:
        parse_workload({"kind": "trace", "path": "bad.csv"}, "scn.yaml", tmp_path)
    assert err.value.file == str(bad) and err.value.where == "line 3"


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"time_offset_s": 500.0}, "workload.time_offset_s"),
        ({"time_offset_s": -1.0}, "workload.time_offset_s"),
        ({"rate_scale": 0}, "workload.rate_scale"),
        ({"spread": "zigzag"}, "workload.spread"),
        ({"format": "parquet"}, "workload.format"),
        ({"tokens": {}}, "workload.tokens"),
    ],
)
def test_trace_param_errors(trace100, extra, field):
    with pytest.raises(InputError) as err:
        parse_workload({"kind": "trace", "path": str(trace100)} | extra, "scn.yaml", ".")
    assert err.value.where == field, str(err.value)


def test_single_request_trace_cannot_loop(tmp_path):
    one = _trace_file(tmp_path, [0.0], name="one.jsonl")
    assert len(gen({"kind": "trace", "path": str(one)}, n=2)[0]) == 1
    with pytest.raises(InputError) as err:
        parse_workload({"kind": "trace", "path": str(one), "loop": True}, "scn.yaml", ".")
    assert err.value.where == "workload.loop"


# ---------------------------------------------------------------------------------------------
# validation: errors name the field


@pytest.mark.parametrize(
    "spec,field,text",
    [
        ({"kind": "poisson"}, "workload.kind", "known kinds: aperiodic, bursty, closed_loop, diurnal, normal"),
        ({"load": 0.5}, "workload.kind", "known kinds"),
        ({"kind": "normal", "lod": 0.5}, "workload.lod", "unknown field"),
        ({"kind": "normal", "period_s": 60}, "workload.period_s", "unknown field"),
        ({"kind": "normal", "load": -0.1}, "workload.load", "greater than 0"),
        ({"kind": "normal", "load": 0}, "workload.load", "greater than 0"),
        ({"kind": "normal", "load": "high"}, "workload.load", "number"),
        ({"kind": "bursty", "on_fraction": 1.0}, "workload.on_fraction", "less than 1"),
        ({"kind": "bursty", "period_s": 0}, "workload.period_s", "greater than 0"),
        ({"kind": "bursty", "off_rate_ratio": 1.5}, "workload.off_rate_ratio", "less than or equal to 1"),
        ({"kind": "aperiodic", "gap_shape": 1.0}, "workload.gap_shape", "greater than 1"),
        ({"kind": "aperiodic", "burst_mean_s": 200}, "workload", "burst_mean_s"),
        ({"kind": "normal", "tokens": {"prompt": {"median": 2000}}}, "workload.tokens.prompt", "median"),
        ({"kind": "normal", "tokens": {"output": {"mean": 5000}}}, "workload.tokens.output", "max"),
        ({"kind": "normal", "tokens": {"output": {"min": 200}}}, "workload.tokens.output", "median"),
        ({"kind": "normal", "tokens": {"output": {"mode": 3}}}, "workload.tokens.output.mode", "unknown field"),
        ({"kind": "normal", "tokens": {"output": {"max": 20_000_000}}}, "workload.tokens.output.max", "less than"),
        ({"kind": "trace"}, "workload.path", "required"),
    ],
)
def test_validation_names_field(spec, field, text):
    with pytest.raises(InputError) as err:
        parse_workload(spec, "scn.yaml", ".")
    assert err.value.file == "scn.yaml"
    assert err.value.where == field, str(err.value)
    assert text in str(err.value)


def test_workload_must_be_a_mapping():
    with pytest.raises(InputError) as err:
        parse_workload(["normal"], "scn.yaml", ".")
    assert err.value.where == "workload"


def test_volume_guard():
    with pytest.raises(InputError) as err:
        gen({"kind": "normal", "load": 100}, horizon=7 * 86400, capacity=lambda p, o: 1000.0)
    assert err.value.where == "workload.load"
    with pytest.raises(InputError) as err:
        gen({"kind": "bursty", "period_s": 0.01}, horizon=7 * 86400)
    assert err.value.where == "workload.period_s"


# ---------------------------------------------------------------------------------------------
# registry, hash, describe


def test_hash_detects_any_change():
    arrs = gen({"kind": "normal"}, n=2)
    h = arrivals_hash(arrs)
    changed = [Arrivals(arrs[0].t, arrs[0].prompt.copy(), arrs[0].output), arrs[1]]
    prompt = changed[0].prompt.copy()
    prompt[3] += 1
    changed[0] = Arrivals(arrs[0].t, prompt, arrs[0].output)
    assert arrivals_hash(changed) != h
    assert arrivals_hash(arrs[::-1]) != h
    merged = [Arrivals(*(np.concatenate([getattr(a, f) for a in arrs]) for f in ("t", "prompt", "output")))]
    assert arrivals_hash(merged) != h  # sidecar boundaries count
    assert len(h) == 64


def test_describe_workloads_lists_every_kind():
    info = {d["kind"]: d for d in describe_workloads()}
    assert set(info) == set(WORKLOADS) >= set(SYNTHETIC) | {"trace"}
    bursty = {p["name"]: p for p in info["bursty"]["params"]}
    assert bursty["period_s"]["default"] == 120.0 and bursty["on_fraction"]["default"] == 0.25
    assert bursty["tokens"]["default"]["output"]["median"] == 129.0
    assert {p["name"]: p for p in info["trace"]["params"]}["path"]["required"] is True
    assert all(d["summary"] and d["doc"] for d in info.values())


def test_new_kind_is_one_function_and_a_decorator():
    class ConstParams(W.SyntheticParams):
        kind: str = "const_test"
        load: float = 0.5

    @W.synthetic("const_test", ConstParams)
    def const_test(p, ctx):
        """Flat Poisson, for this test."""
        return np.array([0.0, ctx.horizon_s]), np.array([1.0])

    try:
        (a,) = gen({"kind": "const_test"}, n=1, horizon=2000)
        assert abs(len(a) - 0.5 * CAP * 2000) < poisson_tol(0.5 * CAP * 2000)
    finally:
        del WORKLOADS["const_test"]


def test_zero_sidecars_and_bad_horizon():
    assert gen({"kind": "normal"}, n=0) == []
    with pytest.raises(ValueError):
        gen({"kind": "normal"}, horizon=0)


def test_parsed_params_accepted(trace100):
    p = parse_workload({"kind": "trace", "path": str(trace100)}, "scn.yaml", ".")
    assert arrivals_hash(gen(p)) == arrivals_hash(gen({"kind": "trace", "path": str(trace100)}))
