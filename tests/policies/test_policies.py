"""Merge policies (docs/model.md): pressure signals, decision rules on hand-made observations,
the corridor in every regime, matched budgets, errors, the CLI, and the bursty sanity check."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from policy_cases import corridor_params, registered
from shipped import load_shipped

from wadiloco.experiments.cli import main as cli_main
from wadiloco.experiments.runner import run_one
from wadiloco.models.errors import InputError
from wadiloco.models.policies import POLICIES, make_policy, parse_policy
from wadiloco.models.policies.base import NEVER, LearnerSignals, Observation, PolicyContext
from wadiloco.models.results import invariants as inv
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.sim.fleet import Fleet, simulate

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(glob.glob(str(ROOT / "scenarios" / "*.yaml")))
# A scaled-down corridor so that a short run holds several merges: 100 s = ~200 inner steps.
SHORT = {"horizon_s": 100, "drain_s": 5, "merge.h_min": 24, "merge.h_max": 64, "policy.params.H": 48}
# Every registered policy that declares `respects_corridor` (tests/policy_cases.py), with its
# defaults fitted to the short corridor; `None` means "fit the defaults", a dict is a variant.
CORRIDOR_CASES = [pytest.param(n, None, id=n) for n in registered(lambda c: c.respects_corridor)] + [
    pytest.param("online_forecast", {"forecaster": "holt_winters", "refit_s": 20}, id="online_forecast-holt_winters"),
]
# Read at import, before any test can register a test-only policy (tests/sweep_plugins.py).
MATCHED = registered(lambda c: c.takes_reference)


def scenario(name: str, **overrides):
    return with_overrides(load_scenario(ROOT / "scenarios" / f"{name}.yaml"), overrides)


def obs(
    step=200,
    last=0,
    *,
    h_min=128,
    h_max=512,
    p_net=0.0,
    p_srv=0.0,
    p_ckpt=0.0,
    counts=None,
    now=None,
    merges=0,
    dur=0.0,
) -> Observation:
    stale = step - last
    learners = tuple(LearnerSignals(1e-4 * stale, 524288.0 * stale, stale) for _ in range(4))
    return Observation(
        now=now if now is not None else step * 0.5,
        step=step,
        last_merge_step=last,
        merges=merges,
        h_min=h_min,
        h_max=h_max,
        step_time_s=0.5,
        learners=learners,
        p_net=p_net,
        p_srv=p_srv,
        p_ckpt=p_ckpt,
        queue_len=0,
        running=0,
        bin_s=1.0,
        arrival_counts=np.asarray(counts if counts is not None else [], dtype=float),
        merge_duration_s=dur,
    )


def policy(name: str, **params):
    return make_policy(name, params, PolicyContext(128, 512, 0))


# ---- pressure signals -----------------------------------------------------------------------


def record(sc, pol, params, seed=0):
    f = Fleet(resolve(sc, pol, params), seed, plan_ahead=False)  # (every policy observes at every step)
    seen: list[Observation] = []
    orig = f.monitor.observe

    def spy(k):
        o = orig(k)
        seen.append(o)
        return o

    f.monitor.observe = spy
    return f.run(), seen


def test_pressure_signals_in_unit_interval_and_respond():
    runs = {}
    for name in ("normal", "pressure_heavy"):
        sc = scenario(name, horizon_s=90, drain_s=5, **{"merge.h_min": 40, "merge.h_max": 80, "policy.params.H": 40})
        runs[name] = record(sc, "fixed", {"H": 40})
    for name, (_res, seen) in runs.items():
        for o in seen:
            for v in (o.p_net, o.p_srv, o.p_ckpt):
                assert 0.0 <= v <= 1.0, (name, o.step, v)
    srv = {n: np.mean([o.p_srv for o in seen if o.now > 30]) for n, (_, seen) in runs.items()}
    assert srv["pressure_heavy"] > srv["normal"] + 0.2, srv
    res, seen = runs["normal"]
    first = res.merges[0]
    before = [o for o in seen if o.now < first.start]
    after = [o for o in seen if o.merges == 1][0]  # the first decision after the merge completed
    assert all(o.p_net == 0 and o.p_ckpt == 0 for o in before)
    assert after.p_net > 0.02 and after.p_ckpt > 0.02
    assert after.merge_duration_s == pytest.approx(first.duration)
    assert after.steps_since_merge == 1 and all(ls.staleness in (0, 1) for ls in after.learners)


def test_pressure_window_is_configurable():
    """With a 5 s window, network pressure is gone 10 s after a merge; with 30 s it is not."""
    vals = {}
    for w in (5.0, 30.0):
        sc = scenario(
            "normal",
            horizon_s=60,
            drain_s=5,
            **{"merge.h_min": 40, "merge.h_max": 200, "policy.params.H": 40, "monitor.pressure_window_s": w},
        )
        res, seen = record(sc, "fixed", {"H": 40})
        end = res.merges[0].end
        vals[w] = [o.p_net for o in seen if end + 10 < o.now < end + 12]
    assert vals[5.0] and max(vals[5.0]) == 0.0
    assert min(vals[30.0]) > 0.0


# ---- decision rules on hand-made observations ------------------------------------------------


def test_pressure_gated_defers_and_is_forced_at_h_max():
    p = policy("pressure_gated", H=256, threshold=0.5)
    assert not p.decide(obs(255))
    assert p.decide(obs(256))
    assert not p.decide(obs(300, p_srv=0.9))  # deferred
    assert not p.decide(obs(511, p_net=0.9))
    assert p.decide(obs(512, p_srv=1.0))  # forced
    w = policy("pressure_gated", H=256, threshold=0.5, combine="weighted", w_net=1, w_srv=1, w_ckpt=0)
    assert w.decide(obs(300, p_srv=0.9, p_net=0.0))  # mean 0.45 <= 0.5
    assert not w.decide(obs(300, p_srv=0.9, p_net=0.2))


def test_wa_diloco_score_and_rule():
    p = policy("wa_diloco")
    assert p.p.w_srv == max(p.p.w_srv, p.p.w_net, p.p.w_ckpt, p.p.w_loss, p.p.w_tok, p.p.w_stale)
    assert not p.decide(obs(127))
    assert p.decide(obs(128))  # quiet fleet: merge at h_min
    assert not p.decide(obs(200, p_srv=1.0))  # saturated serving holds it back ...
    assert p.decide(obs(512, p_srv=1.0))  # ... until h_max
    # at 50 % serving load it waits until progress outweighs the load (around 256 steps)
    assert not p.decide(obs(200, p_srv=0.5))
    assert p.decide(obs(300, p_srv=0.5))
    dl, tk, st = p.progress_terms(obs(256))
    assert st == pytest.approx(0.5) and tk == pytest.approx(0.5) and 0 < dl <= 1
    hi = policy("wa_diloco", threshold=0.9)
    assert not hi.decide(obs(400)) and hi.decide(obs(512))


def test_online_forecast_merges_in_lulls_not_in_bursts():
    rng = np.random.default_rng(0)
    t = np.arange(400)
    rate = np.where((t % 120) < 30, 250, 50)  # bursts at 0, 120, 240, 360 s
    counts = rng.poisson(rate).astype(float)

    def walk(pol, t0, t1, **kw):
        """Decisions at every inner step from t0 to t1 s, as the fleet would ask them."""
        out = []
        for k in range(2 * t0, 2 * t1):
            now = k / 2
            out.append(pol.decide(obs(300 + k - 2 * t0, counts=counts[: int(now)], now=now, **kw)))
        return out

    assert any(walk(policy("online_forecast"), 280, 350))  # the lull after the third burst
    assert not any(walk(policy("online_forecast"), 361, 390))  # inside the fourth burst
    assert not any(walk(policy("online_forecast"), 280, 350, p_srv=1.0))  # the wa_diloco score gates
    assert walk(policy("online_forecast"), 361, 390)[-1] is False
    p = policy("online_forecast")
    assert p.decide(obs(512, counts=counts[:370], now=370.5))  # forced at h_max


def test_online_forecast_holt_winters_waits_for_the_forecast_trough():
    """A seasonal forecaster sees the burst end coming; the EWMA cannot rank future windows."""
    t = np.arange(600)
    rate = np.where((t % 120) < 60, 250.0, 50.0)  # on half the time, so a lull is cheap but not rare
    counts = np.random.default_rng(1).poisson(rate).astype(float)[:530]  # now: 50 s into a burst
    hw = policy("online_forecast", forecaster="holt_winters", quantile=1.0)
    assert not hw.decide(obs(300, counts=counts, now=530.5))
    costs = hw.last_costs
    assert costs is not None and costs[0] > 2 * costs.min()  # the trough ahead is recognised
    ew = policy("online_forecast", quantile=1.0)
    ew.decide(obs(300, counts=counts, now=530.5))
    assert np.ptp(ew.last_costs) <= 1e-9 * ew.last_costs.max()  # flat forecast: all windows cost the same


# ---- the corridor in every regime -----------------------------------------------------------

_refs: dict[str, dict] = {}


def _reference(path: str) -> dict:
    if path not in _refs:
        r = run_one(with_overrides(load_shipped(Path(path)), SHORT), 0, "wa_diloco", {}, check=True)
        _refs[path] = {"merges": r.summary["merges"], "steps": r.summary["inner_steps"]}
    return _refs[path]


@pytest.mark.parametrize("pol,params", CORRIDOR_CASES)
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: Path(p).stem)
def test_corridor_every_policy_every_regime(path, pol, params):
    sc = with_overrides(load_shipped(Path(path)), SHORT)
    params = corridor_params(pol, 24, 64, 48) if params is None else params
    ref = _reference(path) if POLICIES[pol].takes_reference else None
    res = run_one(sc, 0, pol, params, check=True, reference=ref)  # check=True runs check_corridor too
    steps = res.summary["merge_steps"]
    gaps = np.diff([0] + steps)
    assert np.all((gaps >= 24) & (gaps <= 64)), (steps, gaps)
    assert res.summary["inner_steps"] - (steps[-1] if steps else 0) <= 64 + 1
    inv.check_corridor(steps, 24, 64, res.summary["inner_steps"])
    assert len(steps) >= 2  # ~200 steps: the corridor forces at least 3
    if ref is not None:
        assert res.summary["merges"] == ref["merges"]


# ---- matched budgets ---------------------------------------------------------------------------


@pytest.mark.parametrize("pol", MATCHED)
def test_matched_budget_equals_reference(pol):
    """Narrow full-size corridor [128, 256] and a reference that packs merges at h_min: the runner
    runs the reference first (same seed), the control uses exactly its merge count. (The bursty
    sanity test below checks the same over 10 seeds with wa_diloco as the reference.)"""
    sc = scenario("sustained_sync_heavy", horizon_s=240, drain_s=5)
    res = run_one(sc, 1, pol, {"reference": "fixed", "reference_params": {"H": 128}}, check=True)
    assert res.summary["reference_merges"] == res.summary["merges"] >= 3


def test_matched_random_draws_differ_and_repeat():
    sc = scenario("bursty", **SHORT)
    ref = _reference(str(ROOT / "scenarios" / "bursty.yaml"))
    a = [run_one(sc, 0, "matched_random", {}, draw=d, reference=ref).summary["merge_steps"] for d in (0, 1, 0)]
    assert a[0] == a[2] and a[0] != a[1]


def test_matched_count_that_cannot_fit_is_an_input_error():
    sc = scenario("bursty", **SHORT)
    for pol in MATCHED:
        with pytest.raises(InputError) as e:
            run_one(sc, 0, pol, {}, reference={"merges": 40, "steps": 200})
        assert e.value.where == "policy.params.reference" and "cannot be placed" in e.value.message
    with pytest.raises(InputError) as e:  # run outside the runner: no reference figures at all
        simulate(sc, 0, "matched_random", {})
    assert e.value.where == "policy.params.reference"


@pytest.mark.parametrize(
    "params",
    [
        {"reference": "nope"},
        {"reference": "no_sync"},
        {"reference": "matched_random"},
        {"reference_params": {"H": -1}},
        {"reference": "fixed", "reference_params": {"bogus": 1}},
    ],
)
def test_bad_reference_params_are_input_errors(params):
    with pytest.raises(InputError) as e:
        parse_policy("matched_random", params)
    assert e.value.where.startswith("policy.params")


# ---- CLI -------------------------------------------------------------------------------------


def test_cli_policies_lists_every_policy_with_defaults(capsys):
    assert cli_main(["policies"]) == 0
    out = capsys.readouterr().out
    for name in POLICIES:
        assert name in out
    assert "Undefined" not in out and "reference_params = {}" in out
    assert cli_main(["policies", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(POLICIES)
    caps = {r["name"]: (r["oracle"], r["control"], r["takes_reference"]) for r in rows}
    assert caps == {n: (c.oracle, c.control, c.takes_reference) for n, c in POLICIES.items()}


def test_cli_run_every_policy(tmp_path, capsys):
    data = yaml.safe_load((ROOT / "scenarios" / "bursty.yaml").read_text())
    data.update(
        horizon_s=80, drain_s=5, merge={"h_min": 24, "h_max": 64}, policy={"name": "fixed", "params": {"H": 48}}
    )
    f = tmp_path / "short.yaml"
    f.write_text(yaml.safe_dump(data))
    for name in POLICIES:
        args = [a for k, v in corridor_params(name, 24, 64, 48).items() for a in ("--param", f"{k}={v}")]
        assert cli_main(["run", str(f), "--policy", name, "--json", *args]) == 0, name
        s = json.loads(capsys.readouterr().out)
        assert s["policy"] == name and isinstance(s["merge_steps"], list)
        assert set(s["violations_by_phase"]) == {"stage", "allreduce", "outer", "ckpt", "none"}
        assert sum(s["violations_by_phase"].values()) == s["slo_violations"]
        if POLICIES[name].takes_reference:
            assert s["merges"] == s["reference_merges"]
    assert cli_main(["run", str(f), "--policy", "matched_random", "--param", "reference=no_sync"]) == 2
    assert "policy.params" in capsys.readouterr().err
    # the reference's own params must fit the corridor (fixed H=256 does not fit [24, 64])
    assert cli_main(["run", str(f), "--policy", "matched_random", "--param", "reference=fixed"]) == 2
    assert "outside the merge corridor" in capsys.readouterr().err


# ---- sanity on the bursty regime -------------------------------------------------------------


def test_bursty_oracle_overlaps_fewer_requests_than_matched_random():
    """The oracle minimises (expected) overlap with the same budget as matched-random, so over 10
    seeds it must overlap fewer requests. Only the mechanism is asserted; SLO figures are reported,
    not asserted."""
    # 2.5 burst periods; 2 islands (4 sidecars) keep it quick, the bursts are fleet-wide either way
    sc = scenario("bursty", horizon_s=300, drain_s=10, **{"fleet.islands": 2})
    oc, mr = [], []
    for seed in range(10):
        r = run_one(sc, seed, "wa_diloco", {})
        ref = {"merges": r.summary["merges"], "steps": r.summary["inner_steps"]}
        a = run_one(sc, seed, "overlap_oracle", {}, reference=ref).summary
        b = run_one(sc, seed, "matched_random", {}, reference=ref).summary
        assert a["merges"] == b["merges"] == ref["merges"]
        assert a["arrivals_hash"] == b["arrivals_hash"]
        oc.append(a["overlap_requests"])
        mr.append(b["overlap_requests"])
    assert np.mean(oc) < np.mean(mr), (oc, mr)


def test_sim_oracle_finds_a_harmless_placement_a_stand_in_simulator_allows():
    """A stand-in simulator: 0.5-s steps, each merge holds training 4 s (8 steps), and a merge that
    starts in the busy window 20-50 s costs one violation. The search (probes, dynamic programme
    shifting later merges by the merges before them, local moves) finds the narrow corner of the
    corridor that avoids the window with all three merges."""
    from wadiloco.models.policies.base import FutureView, WhatIf

    asked = []

    def busy(steps):  # the (j+1)-th merge at step k starts at 0.5 k + 4 j seconds
        return [40 <= k + 8 * j <= 100 for j, k in enumerate(steps)]

    def simulate(steps):
        asked.append(list(steps))
        return WhatIf(sum(busy(steps)), 1000.0, tuple(steps), 4.0)

    ctx = PolicyContext(24, 64, 0, reference_merges=3, reference_steps=205, rng=np.random.default_rng(0))
    pol = make_policy("sim_oracle", {}, ctx)
    pol.prepare(FutureView(np.arange(0.0, 100.0), 110.0, 0.5, 8, simulate))
    assert len(pol.plan) == 3 and not any(busy(pol.plan))
    assert np.all(np.diff([0, *pol.plan]) >= 24) and np.all(np.diff([0, *pol.plan]) <= 64)
    assert pol.search["best"] == 0 and pol.search["runs"] == len(asked) <= 64
    assert [] in asked and [24] in asked  # the no-merge run and the first probe
    assert [pol.next_merge(0, 0), pol.next_merge(pol.plan[0], pol.plan[0])] == pol.plan[:2]
    with pytest.raises(InputError, match="needs the simulator"):
        make_policy("sim_oracle", {}, ctx).prepare(FutureView(np.arange(3.0), 10.0, 0.5, 8))


def test_sim_oracle_run_is_its_best_simulation_and_beats_its_candidates():
    """On a real run: the oracle's own result is the best placement it simulated (so the what-if
    reproduces the run exactly), it spends the reference's budget, and it is no worse than the
    candidates it started from (the marginal-cost plan and the overlap proxy's)."""
    sc = scenario("bursty", horizon_s=300, drain_s=10, **{"fleet.islands": 2, "policy.params": {"H": 128}})
    for seed in (0, 1):
        r = run_one(sc, seed, "wa_diloco", {})
        ref = {"merges": r.summary["merges"], "steps": r.summary["inner_steps"]}
        s = run_one(sc, seed, "sim_oracle", {}, reference=ref, check=True).summary
        found = s["oracle_search"]
        assert s["merges"] == ref["merges"] and s["slo_violations"] == found["best"]
        assert found["best"] <= min(found["dp"], found["proxy"]) and found["runs"] <= 64
        base = run_one(sc, seed, "no_sync", {}).summary
        assert found["no_merges"] == base["slo_violations"]


def test_capabilities_are_declared_and_checked_at_registration():
    from wadiloco.models.policies import POLICIES, register
    from wadiloco.models.policies.base import Policy
    from wadiloco.models.policies.matched_random import ReferenceParams

    assert {n for n, c in POLICIES.items() if c.takes_reference} >= {"matched_random", "overlap_oracle", "sim_oracle"}
    assert POLICIES["matched_random"].control and not POLICIES["wa_diloco"].control
    assert (
        POLICIES["overlap_oracle"].oracle and POLICIES["sim_oracle"].oracle and not POLICIES["online_forecast"].oracle
    )

    class Undeclared(Policy):  # has a reference field but does not say so
        name = "test_undeclared"
        Params = ReferenceParams

    with pytest.raises(ValueError, match="takes_reference"):
        register(Undeclared)
    assert "test_undeclared" not in POLICIES


# ---- planned policies: answers from the step count alone (Policy.next_merge) ----------------------


def _planned(name: str):
    if name == "matched_random":
        ctx = PolicyContext(24, 64, 3, draw=1, reference_merges=4, reference_steps=300)
        return make_policy(name, {"reference": "fixed", "reference_params": {"H": 48}}, ctx)
    return make_policy(name, {"H": 40} if name == "fixed" else {}, PolicyContext(24, 64, 3))


@pytest.mark.parametrize("name", ["fixed", "no_sync", "matched_random"])
def test_next_merge_is_the_first_step_decide_merges_at(name):
    """The fleet asks a planned policy nothing between merges (sim.fleet Fleet.decide): its
    next_merge must be exactly the first later step at which `decide` says merge."""
    pol = _planned(name)
    for last in (0, 17, 40, 120):
        for step in range(last, last + 200, 7):
            want = next((k for k in range(step + 1, 400) if pol.decide(obs(k, last, h_min=24, h_max=64))), NEVER)
            got = pol.next_merge(step, last)
            assert (got if got < 400 else NEVER) == want, (name, step, last)


def test_policies_that_observe_are_not_planned():
    for name in ("pressure_gated", "wa_diloco", "online_forecast"):
        assert policy(name).next_merge(10, 0) is None, name


@pytest.mark.parametrize(
    "pol, params, extra",
    [
        ("fixed", {"H": 48}, {}),
        ("matched_random", {"reference": "fixed", "reference_params": {"H": 48}}, {}),
        ("no_sync", {}, {}),
        # no jitter: the islands end each step at the same instant, often on the monitor's sample grid
        ("fixed", {"H": 48}, {"training.step_jitter": 0.0, "training.step_time_s": 0.5}),
        # islands that hold the serving GPU while they step, and release it at barriers and the horizon
        ("fixed", {"H": 48}, {"fleet.gpu_sharing": "timeslice", "fleet.colocation": "same_gpu"}),
    ],
    ids=["fixed", "matched_random", "no_sync", "no-jitter", "timeslice"],
)
def test_a_planned_policy_runs_as_one_asked_every_step(pol, params, extra):
    """Same decisions (steps and instants), merges, requests and timeline whether the fleet asks the
    policy with an Observation at every step (and bounds the engines there) or plans ahead to its
    next merge, its islands coasting through the steps before it (sim.training Trainer._coast)."""
    sc = scenario("bursty", **SHORT, **extra)
    runs = []
    for planned in (True, False):
        r = resolve(sc, pol, params)
        ref = {"merges": 3, "steps": 200} if pol == "matched_random" else {}
        f = Fleet(r, 2, reference_merges=ref.get("merges"), reference_steps=ref.get("steps"), plan_ahead=planned)
        assert f.planned is planned
        runs.append(f.run())
    a, b = runs
    assert a.decisions == b.decisions and len(a.decisions) > 150
    assert len(a.merges) == len(b.merges) >= (0 if pol == "no_sync" else 2)
    assert [(m.start, m.end) for m in a.merges] == [(m.start, m.end) for m in b.merges]
    for k in a.requests:
        assert np.array_equal(a.requests[k], b.requests[k], equal_nan=a.requests[k].dtype.kind == "f"), k
    for k in a.timeline:
        assert np.array_equal(a.timeline[k], b.timeline[k], equal_nan=a.timeline[k].dtype.kind == "f"), k


def test_islands_of_a_planned_policy_coast_to_the_next_merge():
    """Stepping costs a SimPy event per island step; coasting needs a few per merge and island, and
    changes nothing else."""
    sc = scenario("bursty", **SHORT)
    runs = {}
    for coasting in (True, False):
        f = Fleet(resolve(sc, "fixed", {"H": 48}), 2)
        f.trainer.coasting = coasting
        res = f.run()
        events = next(f.env._eid) - len(f.env._queue)  # scheduled minus those still queued
        runs[coasting] = (events, sum(f.trainer.island_step), res)
    (ev, steps, a), (ev_stepped, _, b) = runs[True], runs[False]
    assert steps > 600 and a.summary["merges"] >= 2 and a.decisions == b.decisions
    assert ev_stepped - ev > steps - 4 * (a.summary["merges"] + 2) * sc.fleet.islands
