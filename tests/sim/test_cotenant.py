"""The GPU co-tenant (sim.cotenant): its slowdown of serving emerges from GPU sharing in the fabric.

- emergence: on an unlimited GPU the co-tenant changes nothing, bit for bit; on a limited one a
  GPU-bound iteration inside a window takes (1 + w) times as long, and one outside is untouched;
- timing: on at the first poll tick at or after a window opens, off when it closes; `merges`
  windows open at the merge ends; one fabric hold per link and window, no polling;
- the lookahead bound includes its switches (lookahead on and off give identical runs);
- its inputs: weight or profile entry, timetable kinds, input errors at load time; labels only
  when asked; the scenario digest of scenarios without the new fields is unchanged.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from shipped import load_shipped

from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import scenario_from_dict, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.testbed.fluid import stress_intervals
from wadiloco.models.testbed.labels import LABEL_COLUMNS
from wadiloco.models.testbed.pressure import max_pressure
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fabric import Fabric
from wadiloco.sim.fleet import Fleet, simulate

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "name": "cotenant",
    "horizon_s": 60,
    "drain_s": 30,
    "fleet": {"islands": 1, "hosts_per_island": 1, "sidecars_per_host": 1},
    "engine": {"host_overhead_s": 0.0},  # with CUDA graphs: no host work, every iteration GPU-bound
    "training": {"step_time_s": 0.05, "step_jitter": 0.0},
    "merge": {"phases": []},
    "workload": {"kind": "normal", "load": 0.6},
    "policy": {"name": "no_sync"},
}
PERIODIC = {"kind": "periodic", "period_s": 10.0, "window_s": 3.0}
COLS = ("arrival", "admitted", "first_token", "finish", "prompt", "output")


def _sc(**patch):
    d = copy.deepcopy(BASE)
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            d[k].update(v)
        else:
            d[k] = v
    return scenario_from_dict(d)


def _same(a, b, cols=COLS) -> bool:
    return all(np.array_equal(a.requests[k], b.requests[k], equal_nan=True) for k in cols)


def test_unlimited_gpu_removes_the_cotenant_exactly():
    unl = {"islands": 1, "hosts_per_island": 1, "sidecars_per_host": 1, "unlimited": ["gpu"]}
    cot = {"weight": 1.5, "timetable": PERIODIC}
    alone, pressed = simulate(_sc(fleet=unl), 0), simulate(_sc(fleet=unl, cotenant=cot), 0)
    assert len(pressed.cotenant_windows) == 6  # it ran...
    assert _same(alone, pressed)  # ...and changed nothing, bit for bit
    assert pressed.summary["contended_iterations"] == 0
    # on a limited GPU the same co-tenant slows serving
    limited = simulate(_sc(cotenant=cot), 0)
    assert limited.summary["contended_iterations"] > 0
    assert limited.summary["e2e_p95_s"] > 1.2 * simulate(_sc(), 0).summary["e2e_p95_s"]


def _one_request(w: float | None, arrive: float, window: tuple[float, float]):
    """One request (prompt 64, 300 new tokens) alone on the sidecar, iterations logged one by one."""
    cot = None
    if w is not None:
        a, b = window
        tbl = {"kind": "windows", "starts": [a], "window_s": b - a, "repeat": False}
        cot = {"weight": w, "poll_s": 0.0, "timetable": tbl}
    sc = _sc(engine={"host_overhead_s": 0.0, "fast_forward": False}, cotenant=cot)
    arr = Arrivals(np.array([arrive]), np.array([64], dtype=np.int64), np.array([300], dtype=np.int64))
    fleet = Fleet(resolve(sc), 0, arrivals=[arr])
    fleet.sidecars[0].iter_log = []
    res = fleet.run()
    return res, np.diff(np.asarray(fleet.sidecars[0].iter_log), axis=1)[:, 0]


@pytest.mark.parametrize("w", [1.0, 0.5510537538567034, 3.0])
def test_an_iteration_inside_a_window_takes_1_plus_w_times_as_long(w):
    base, d0 = _one_request(None, 2.0, (0.0, 0.0))
    inside, d1 = _one_request(w, 2.0, (1.0, 40.0))  # the whole request runs inside the window
    assert len(d0) == len(d1) == 300
    np.testing.assert_allclose(d1, (1.0 + w) * d0, rtol=1e-12, atol=0)
    e2e = inside.requests["e2e"][0]
    assert e2e == pytest.approx((1.0 + w) * base.requests["e2e"][0], rel=1e-12)
    # a window that closes before the request arrives leaves every iteration as it was
    _, d2 = _one_request(w, 2.0, (0.5, 1.5))
    assert np.array_equal(d2, d0)


def test_a_window_opening_mid_request_slows_only_what_follows():
    base, d0 = _one_request(None, 1.0, (0.0, 0.0))
    t_on = 1.0 + float(np.sum(d0[:100])) + 0.3 * d0[100]  # 30% into iteration 100
    _, d1 = _one_request(1.0, 1.0, (t_on, 50.0))
    assert np.array_equal(d1[:100], d0[:100])
    assert d1[100] == pytest.approx(d0[100] * (0.3 + 2 * 0.7), rel=1e-12)  # the rest at half speed
    np.testing.assert_allclose(d1[101:], 2.0 * d0[101:], rtol=1e-12)


def test_switches_on_at_the_first_poll_tick_and_off_when_the_window_closes():
    starts = [1.234, 7.7, 20.0, 33.351]
    tbl = {"kind": "windows", "starts": starts, "window_s": 4.0, "repeat": False}
    res = simulate(_sc(cotenant={"weight": 0.5, "timetable": tbl}), 0)
    got = res.cotenant_windows
    assert got == stress_intervals([(s, s + 4.0) for s in starts])  # the fluid oracle's rule, exactly
    for (on, off), s in zip(got, starts):
        assert s <= on < s + 0.05 and off == s + 4.0
        assert abs(on / 0.05 - round(on / 0.05)) < 1e-9  # on the 50-ms grid
    exact = simulate(_sc(cotenant={"weight": 0.5, "poll_s": 0.0, "timetable": tbl}), 0)
    assert exact.cotenant_windows == [(s, s + 4.0) for s in starts]


def test_overlapping_windows_switch_once_and_each_window_costs_one_hold(monkeypatch):
    starts = []
    real = Fabric.start

    def counting(self, links, work, weight=1.0, max_rate=float("inf"), tag=None):
        if isinstance(tag, tuple) and tag[0] == "cotenant":
            starts.append(self.env.now)
        return real(self, links, work, weight, max_rate, tag)

    monkeypatch.setattr(Fabric, "start", counting)
    union = {"kind": "union", "of": [PERIODIC, {"kind": "periodic", "period_s": 10.0, "window_s": 1.0, "phase_s": 8.0}]}
    fleet = {"islands": 1, "hosts_per_island": 2, "sidecars_per_host": 2}
    res = simulate(_sc(fleet=fleet, cotenant={"weight": 0.5, "timetable": union}), 0)
    # [2, 3] of the second part touches nothing; [0, 3] u [2, 3] is one window: 6 windows x 4 links
    assert [a for a, _ in res.cotenant_windows] == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert len(starts) == 6 * 4 and sorted(set(starts)) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]


def test_only_the_chosen_sidecars_are_pressed():
    fleet = {"islands": 1, "hosts_per_island": 1, "sidecars_per_host": 2}
    alone = simulate(_sc(fleet=fleet), 0)
    one = simulate(_sc(fleet=fleet, cotenant={"weight": 1.0, "sidecars": [1], "timetable": PERIODIC}), 0)
    both = simulate(_sc(fleet=fleet, cotenant={"weight": 1.0, "timetable": PERIODIC}), 0)
    for res in (one, both):
        assert np.array_equal(res.requests["arrival"], alone.requests["arrival"])
    s0 = alone.requests["sidecar"] == 0
    assert np.array_equal(one.requests["finish"][s0], alone.requests["finish"][s0])
    assert not np.array_equal(one.requests["finish"][~s0], alone.requests["finish"][~s0])
    assert not np.array_equal(both.requests["finish"][s0], alone.requests["finish"][s0])


REPLAY = {"name": "replay", "params": {"starts": [3.0, 17.51, 30.0, 44.444], "repeat": False}}


@pytest.mark.parametrize(
    "cot,merge,policy",
    [
        ({"weight": 0.55, "timetable": {"kind": "union", "of": [PERIODIC, {"kind": "merges"}]}}, {}, REPLAY),
        ({"weight": 2.0, "timetable": {"kind": "pressure", "period_s": 20.0}}, {}, REPLAY),
        ({"weight": 0.55, "timetable": {"kind": "merges", "window_s": 5.0}}, {"phases": ["allreduce"]}, REPLAY),
        ({"weight": 0.8, "timetable": PERIODIC}, {"phases": ["stage", "allreduce", "outer", "ckpt"]}, REPLAY),
    ],
)
def test_lookahead_on_and_off_give_identical_runs(cot, merge, policy):
    d = {"merge": {"phases": [], **merge}, "cotenant": cot, "policy": policy}
    fleet = {"islands": 2, "hosts_per_island": 1, "sidecars_per_host": 1, "colocation": "same_gpu"}
    sc = _sc(fleet=fleet, **d)
    on, off = simulate(sc, 1, lookahead=True), simulate(sc, 1, lookahead=False)
    assert on.summary["merges"] >= 3 and len(on.cotenant_windows) >= 3
    assert on.summary["contended_iterations"] > 0
    assert _same(on, off)
    assert on.cotenant_windows == off.cotenant_windows and on.decisions == off.decisions
    assert [(m.start, m.end) for m in on.merges] == [(m.start, m.end) for m in off.merges]


def test_merges_windows_open_at_the_merge_ends():
    for phases in ([], ["stage", "allreduce", "outer", "ckpt"]):
        res = simulate(
            _sc(merge={"phases": phases}, cotenant={"weight": 0.5, "timetable": {"kind": "merges"}}, policy=REPLAY), 0
        )
        ends = [m.end for m in res.merges]
        assert len(ends) == 4
        ons = np.array([a for a, _ in res.cotenant_windows])
        assert [b for _, b in res.cotenant_windows] == [min(e + 8.0, 60.0) for e in ends]  # never past the horizon
        if not phases:  # instantaneous merges end on the 50-ms step grid, which is the poll grid
            np.testing.assert_allclose(ons, ends, rtol=0, atol=1e-6)
        else:  # merges of ~8 s end anywhere; the co-tenant waits for the next poll tick
            assert all(m.end - m.start > 1.0 for m in res.merges)
            assert np.all((ons >= ends) & (ons < np.array(ends) + 0.05))
            np.testing.assert_allclose(ons / 0.05, np.round(ons / 0.05), rtol=0, atol=1e-9)


def test_weight_from_the_engine_profile_is_the_profiles_fit():
    from wadiloco.models.engine.profiles import load_profile

    cot = {"profile_entry": "matmul_6144x20", "timetable": PERIODIC}
    r = resolve(_sc(engine={"profile": "b200_vllm0102_eager"}, cotenant=cot))
    assert r.cotenant.weight == load_profile("b200_vllm0102_eager").cotenants["matmul_6144x20"]
    assert 0.5 < r.cotenant.weight < 0.6  # the targeted runs' L_s / L_u - 1 (1.556, 1.546)


@pytest.mark.parametrize(
    "patch,where",
    [
        ({"cotenant": {"timetable": PERIODIC}}, "cotenant"),
        ({"cotenant": {"weight": 1.0, "profile_entry": "matmul_6144x20", "timetable": PERIODIC}}, "cotenant"),
        ({"cotenant": {"profile_entry": "matmul_6144x20", "timetable": PERIODIC}}, "engine.profile"),
        (
            {
                "engine": {"profile": "b200_vllm0102_eager"},
                "cotenant": {"profile_entry": "nope", "timetable": PERIODIC},
            },
            "cotenant.profile_entry",
        ),
        (
            {"engine": {"profile": "no_such_profile"}, "cotenant": {"profile_entry": "x", "timetable": PERIODIC}},
            "engine.profile",
        ),
        (
            {"cotenant": {"weight": 1.0, "timetable": {"kind": "windows", "file": "missing.txt"}}},
            "cotenant.timetable.file",
        ),
        ({"cotenant": {"weight": 1.0, "timetable": {"kind": "windows"}}}, "cotenant.timetable"),
        ({"cotenant": {"weight": 1.0, "timetable": {"kind": "weekly"}}}, "cotenant.timetable"),
        ({"cotenant": {"weight": 1.0, "timetable": {"kind": "union", "of": []}}}, "cotenant.timetable"),
        ({"cotenant": {"weight": 1.0, "sidecars": [1], "timetable": PERIODIC}}, "cotenant"),
        ({"cotenant": {"weight": 0.0, "timetable": PERIODIC}}, "cotenant.weight"),
        ({"cotenant": {"weight": 1.0, "timetable": {"kind": "periodic", "period_s": 1e-5, "window_s": 0}}}, "period_s"),
        ({"merge": {"phases": ["ckpt", "stage"]}}, "merge.phases"),
        (
            {"testbed_labels": {"pressure": {"kind": "periodic", "period_s": 5, "window_s": 1}}},
            "testbed_labels.pressure",
        ),
    ],
)
def test_input_errors_name_the_field(patch, where):
    d = copy.deepcopy(BASE)
    for k, v in patch.items():
        d[k] = {**d.get(k, {}), **v} if k in ("engine", "merge") else v
    with pytest.raises(InputError) as e:
        resolve(scenario_from_dict(d, "cot.yaml"))
    assert "cot.yaml" in str(e.value) and where in str(e.value)


def test_windows_from_a_file_resolve_from_the_scenario_folder(tmp_path):
    (tmp_path / "starts.txt").write_text("5.0\n25\n")
    d = copy.deepcopy(BASE)
    d["cotenant"] = {
        "weight": 1.0,
        "poll_s": 0.0,
        "timetable": {"kind": "windows", "file": "starts.txt", "window_s": 2.0},
    }
    sc = scenario_from_dict(d, tmp_path / "s.yaml", tmp_path)
    # D = 25 + 2 = 27: the replay's wrap repeats the two windows every 27 s
    assert simulate(sc, 0).cotenant_windows == [(5.0, 7.0), (25.0, 27.0), (32.0, 34.0), (52.0, 54.0), (59.0, 60.0)]


def test_labels_only_when_asked():
    plain = simulate(_sc(cotenant={"weight": 0.5, "timetable": PERIODIC}), 0)
    assert not set(LABEL_COLUMNS) & set(plain.requests)
    labels = {"sync": PERIODIC, "pressure": {"kind": "pressure", "period_s": 20.0}}
    lab = simulate(_sc(cotenant={"weight": 0.5, "timetable": PERIODIC}, testbed_labels=labels), 0)
    t = lab.requests["arrival"]
    assert _same(plain, lab)  # labels change no result
    assert np.array_equal(lab.requests["sync_active"], np.mod(t, 10.0) <= 3.0)
    assert np.array_equal(lab.requests["max_pressure"], max_pressure(t, 20.0))
    assert np.array_equal(lab.requests["high_pressure"], max_pressure(t, 20.0) >= 0.6)
    bursty = simulate(_sc(testbed_labels={"pressure": {"kind": "bursty", "period_s": 20.0, "window_s": 5.0}}), 0)
    busy = np.mod(bursty.requests["arrival"], 20.0) < 5.0
    assert np.array_equal(bursty.requests["max_pressure"], np.where(busy, 0.95, 0.20))
    assert np.array_equal(bursty.requests["high_pressure"], busy)
    assert not bursty.requests["sync_active"].any()  # default sync labels: merges, and no_sync has none


def test_sync_labels_from_merges_cover_each_window_after_a_merge_end():
    res = simulate(_sc(policy=REPLAY, testbed_labels={"sync": {"kind": "merges", "window_s": 8.0}}), 0)
    t = res.requests["arrival"]
    ends = np.array([m.end for m in res.merges])
    expect = ((t[:, None] >= ends) & (t[:, None] <= ends + 8.0)).any(axis=1)
    assert expect.any() and np.array_equal(res.requests["sync_active"], expect)


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_new_fields_at_their_defaults_keep_every_shipped_digest(path):
    sc = load_shipped(path)
    same = with_overrides(sc, {"merge.phases": ["stage", "allreduce", "outer", "ckpt"], "engine.profile": None})
    assert same.digest() == sc.digest()
    assert with_overrides(sc, {"merge.phases": []}).digest() != sc.digest()
    cot = with_overrides(sc, {"cotenant": {"weight": 1.0, "timetable": {"kind": "none"}}})
    assert cot.digest() != sc.digest()
    assert with_overrides(sc, {"testbed_labels": {}}).digest() != sc.digest()
