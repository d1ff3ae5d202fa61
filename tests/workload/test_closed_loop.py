"""Closed-loop clients (models/workload/clients.py, workload kind `closed_loop`), the e2e SLO and engine profiles.

Latencies in the hand-computed cases are dyadic (a = 2^-8, d = 2^-10 s, no host work), so batch
times are exact and compared with ==.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from wadiloco.experiments.cli import main
from wadiloco.experiments.output import requests_csv
from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.engine.profiles import load_profile
from wadiloco.models.errors import InputError
from wadiloco.models.results.invariants import InvariantError
from wadiloco.models.spec.load import load_scenario, scenario_from_dict, with_overrides
from wadiloco.models.spec.scenario import Scenario
from wadiloco.models.testbed import fit, fluid
from wadiloco.models.workload import clients
from wadiloco.sim.fleet import Fleet, simulate

ROOT = Path(__file__).resolve().parents[2]
A, D = 2.0**-8, 2.0**-10
TINY = LatencyModel(A, 0.0, 0.0, D, r2=float("nan"), n=0, max_rel_err=float("nan"))
PROFILE, MODEL = "b200_vllm0102_eager", "Qwen2.5-1.5B-Instruct"


def scenario(workload: dict, **top) -> Scenario:
    data = {
        "horizon_s": 2.0,
        "drain_s": 1.0,
        "fleet": {"islands": 1, "hosts_per_island": 1, "learner_gpus_per_host": 1, "sidecars_per_host": 1},
        "engine": {"host_overhead_s": 0.0},
        "slo": {"ttft_s": None, "tpot_s": None},
        "workload": {"kind": "closed_loop", **workload},
        "policy": {"name": "no_sync"},
    }
    for k, v in top.items():
        data[k] = {**data[k], **v} if isinstance(v, dict) and isinstance(data.get(k), dict) else v
    return scenario_from_dict(data)


def run(sc, seed=0, lat=TINY, **kw):
    return simulate(sc, seed, latency=lat, check=True, **kw)


def req_hash(res) -> str:
    return hashlib.sha256(requests_csv(res.requests).encode()).hexdigest()


# ---- batch mode ----------------------------------------------------------------------------------


def test_batch_latency_hand_computed():
    # c = 4 short prompts, 8 output tokens: one prefill iteration (first tokens) + 7 decodes, each
    # a + 4d = 2^-7 (prefill tokens cost nothing under a + d*batch): a batch takes 8 * 2^-7 = 2^-4.
    res = run(
        scenario(
            {"concurrency": {"kind": "steady", "c": 4}, "prompts": "short", "output_tokens": 8, "start_delay_s": 1.0}
        )
    )
    q = res.requests
    starts = np.unique(q["arrival"])
    assert list(starts) == [1.0 + k * 2.0**-4 for k in range(16)]  # the start at 2.0 is not < horizon
    assert len(q["arrival"]) == 64 and list(np.bincount(q["batch"])) == [4] * 16
    assert np.all(q["e2e"] == 2.0**-4) and np.all(q["finish"] == q["arrival"] + 2.0**-4)
    assert res.summary["engine_iterations"] == 16 * 8


def test_batch_with_per_slot_outputs_records_the_batch_latency():
    # outputs 4, 4, 4, 2 by slot: two iterations at batch 4, two at batch 3 (the short one has left)
    res = run(
        scenario(
            {
                "concurrency": {"kind": "steady", "c": 4},
                "prompts": "short",
                "output_tokens": [4, 4, 4, 2],
                "start_delay_s": 0.0,
            },
            horizon_s=0.05,
        )
    )
    q = res.requests
    lat = 2 * (A + 4 * D) + 2 * (A + 3 * D)
    assert np.all(q["e2e"] == lat)  # every request of the batch, also the one done after 2 tokens
    short = q["output"] == 2
    assert np.all(q["finish"][short] - q["arrival"][short] == 2 * (A + 4 * D))
    assert list(np.unique(q["arrival"])) == [k * lat for k in range(int(np.ceil(0.05 / lat)))]


def test_client_gap_and_start_delay():
    res = run(
        scenario(
            {
                "concurrency": {"kind": "steady", "c": 4},
                "prompts": "short",
                "output_tokens": 8,
                "client_gap_s": 0.25,
                "start_delay_s": 0.5,
            }
        )
    )
    starts = np.unique(res.requests["arrival"])
    assert list(starts) == [0.5 + k * (2.0**-4 + 0.25) for k in range(5)]


def test_bursty_concurrency_is_decided_at_batch_start():
    c = clients.Concurrency(4, 12, 120.0, 30.0, 0.0)
    assert [c.at(t) for t in (0.0, 29.9, 30.0, 119.99, 120.0, 150.0)] == [12, 12, 4, 4, 12, 4]
    # a batch starting at 29.9 s is busy (12) although it runs past 30 s; the next one is quiet
    bursty = {"kind": "bursty", "quiet": 4, "busy": 12, "period_s": 120, "window_s": 30, "phase_s": 0}
    res = run(
        scenario(
            {"concurrency": bursty, "prompts": "mixed", "output_tokens": 16, "start_delay_s": 29.9}, horizon_s=30.5
        )
    )
    q = res.requests
    sizes = np.bincount(q["batch"])
    starts = np.array([q["arrival"][q["batch"] == b][0] for b in range(len(sizes))])
    assert starts[0] == 29.9 and sizes[0] == 12 and starts[1] == pytest.approx(29.9 + 16 * (A + 12 * D), abs=1e-12)
    assert list(sizes[1:]) == [4] * (len(sizes) - 1) and starts[1] > 30.0


def test_prompts_cycle_by_the_global_request_index():
    res = run(
        scenario(
            {"concurrency": {"kind": "steady", "c": 2}, "prompts": "mixed", "output_tokens": 8, "start_delay_s": 0.0},
            horizon_s=0.3,
        )
    )
    assert list(res.requests["prompt"][:8]) == [13, 50, 250, 400, 13, 50, 250, 400]


def test_no_batch_at_or_after_the_horizon_and_the_last_drains():
    res = run(
        scenario(
            {"concurrency": {"kind": "steady", "c": 4}, "prompts": "short", "output_tokens": 8, "start_delay_s": 1.97}
        )
    )
    q = res.requests
    assert list(np.unique(q["arrival"])) == [1.97]  # 1.97 + 1/16 > 2: one batch, finished in the drain
    assert q["finish"].max() > 2.0 and res.summary["completed"] == 4
    res = run(scenario({"concurrency": {"kind": "steady", "c": 4}, "start_delay_s": 2.0}))
    assert res.summary["requests"] == 0


# ---- users mode -----------------------------------------------------------------------------------


def users(n=5, think=0.0, **kw):
    return scenario(
        {"mode": "users", "users": n, "think_s": think, "prompts": "mixed", "output_tokens": 16, "start_delay_s": 0.5},
        **kw,
    )


def test_users_with_zero_think_keep_exactly_n_in_flight():
    res = run(users(5))
    q = res.requests
    probe = np.random.default_rng(1).uniform(0.5, 1.9, 400)
    inflight = [(np.sum((q["arrival"] <= t) & (t < q["finish"]))) for t in probe]
    assert set(inflight) == {5}
    for u in range(5):  # each user's next request goes out the instant the last one is answered
        mine = np.sort(q["arrival"][q["user"] == u])
        fin = np.sort(q["finish"][q["user"] == u])
        assert mine[0] == 0.5 and np.all(mine[1:] == fin[:-1])


def test_think_times_are_deterministic_per_seed_and_per_user():
    sc = users(4, {"kind": "exponential", "mean_s": 0.05}, horizon_s=3.0)
    a, b, c = run(sc, 7), run(sc, 7), run(sc, 8)
    assert req_hash(a) == req_hash(b) and req_hash(a) != req_hash(c)
    q = a.requests
    for u in range(4):
        arr, fin = (np.sort(q[k][q["user"] == u]) for k in ("arrival", "finish"))
        assert np.all(arr[1:] > fin[:-1])  # thinking: strictly after the answer
    # a user's k-th think time does not depend on the order users ask in
    mk = lambda: clients.ThinkTimes("exponential", 1.0, lambda u: np.random.default_rng(u), 3)  # noqa: E731
    t1, t2 = mk(), mk()
    first = [t1(0), t1(0), t1(2), t1(1)]
    second = [t2(2), t2(1), t2(0), t2(0)]
    assert first[0] == second[2] and first[1] == second[3] and first[2] == second[0] and first[3] == second[1]


# ---- e2e SLO and profiles -----------------------------------------------------------------------------


def test_e2e_slo_counts_requests_over_the_threshold_strictly():
    wl = {"concurrency": {"kind": "steady", "c": 4}, "prompts": "short", "output_tokens": 8, "start_delay_s": 1.0}
    over = run(scenario(wl, slo={"e2e_s": 0.06}))
    at = run(scenario(wl, slo={"e2e_s": 2.0**-4}))
    assert over.summary["slo_violations"] == 64 and at.summary["slo_violations"] == 0
    assert over.summary["slo"] == {"ttft_s": None, "tpot_s": None, "e2e_s": 0.06}
    # with TTFT/TPOT on, e2e adds to them: TTFT here is one iteration (2^-7), TPOT 2^-7
    both = run(scenario(wl, slo={"e2e_s": 1.0, "ttft_s": 2.0**-8, "tpot_s": 1.0}))
    assert both.summary["slo_violations"] == 64


def test_new_fields_at_default_leave_the_digest_alone():
    base = Scenario()
    assert base.digest() == Scenario(slo={"e2e_s": None}).digest() == Scenario(engine={"model": None}).digest()
    assert Scenario(slo={"e2e_s": 1.0}).digest() != base.digest()


def test_profile_model_reproduces_the_fit_batch_latency():
    """A steady c = 8 mixed 128-token loop of the 1.5B model: each batch is one prefill iteration
    plus 127 decodes at a + 8d, i.e. the fit's L_u(8) (models/testbed/fit.py: O iterations per batch)."""
    sc = scenario(
        {"concurrency": {"kind": "steady", "c": 8}, "prompts": "mixed", "output_tokens": 128},
        engine={"profile": PROFILE, "model": MODEL},
        horizon_s=60.0,
        slo={"e2e_s": 1.0},
    )
    mf = load_profile(PROFILE).model(MODEL)
    l_u = np.mean([fit.fit_run(r).l_u for r in mf.runs])
    res = simulate(sc, 0, check=True)
    q = res.requests
    assert q["arrival"][0] == mf.start_delay_s  # start delay omitted under a profile: the fitted one
    assert np.max(np.abs(q["e2e"] - l_u)) < 1e-12 and res.summary["slo_violations"] == 0
    # the fit's own loop (fluid, no stress) gives the same batch starts
    b = fluid.closed_loop(mf.start_delay_s, 60.0, lambda k, t: (l_u, 8, 8 * 128), [], 0.0)
    assert np.allclose(np.unique(q["arrival"]), b.start, rtol=0, atol=1e-9) and len(b.start) == q["batch"].max() + 1


def test_profile_fields_are_checked_at_load():
    with pytest.raises(InputError, match="no model"):
        scenario({}, engine={"profile": PROFILE, "model": "nope"})
    with pytest.raises(InputError, match="engine.profile"):
        scenario({}, engine={"model": MODEL})
    with pytest.raises(InputError, match="profile"):
        scenario({"start_delay_s": "profile"})
    with pytest.raises(InputError, match="only apply to mode"):
        scenario({"mode": "users", "concurrency": {"kind": "steady", "c": 2}})


# ---- exactness: lookahead and fast-forward -----------------------------------------------------------


@pytest.mark.parametrize(
    "wl",
    [
        {"concurrency": {"kind": "bursty", "quiet": 4, "busy": 12, "period_s": 6, "window_s": 2}, "output_tokens": 64},
        {"mode": "users", "users": 6, "think_s": {"kind": "exponential", "mean_s": 0.2}, "output_tokens": 32},
    ],
)
def test_lookahead_and_fast_forward_are_exact(wl):
    """Merges on the serving GPU (same_gpu) interrupt the engines; results must not depend on how far
    they book ahead or on closed-form decode runs."""
    sc = scenario(
        {"prompts": "mixed", "start_delay_s": 0.3, **wl},
        horizon_s=20.0,
        fleet={"islands": 2, "hosts_per_island": 1, "learner_gpus_per_host": 2, "colocation": "same_gpu"},
        merge={"h_min": 8, "h_max": 16},
        training={"step_time_s": 0.1},
        policy={"name": "fixed", "params": {"H": 10}},
        engine={"host_overhead_s": 0.001},
    )
    noff = scenario_from_dict(
        {**sc.model_dump(mode="json"), "engine": {**sc.engine.model_dump(), "fast_forward": False}}
    )
    runs = [simulate(s, 3, check=True, lookahead=la) for s in (sc, noff) for la in (True, False)]
    assert runs[0].summary["merges"] > 0 and runs[0].summary["contended_iterations"] > 0
    assert len({req_hash(r) for r in runs}) == 1


# ---- invariants ----------------------------------------------------------------------------------------


def _batch_run():
    sc = scenario(
        {"concurrency": {"kind": "steady", "c": 4}, "prompts": "short", "output_tokens": 8, "start_delay_s": 1.0}
    )
    fl = Fleet(sc_resolved(sc), 0, latency=TINY, check=False)
    res = fl.run()
    return fl.clients[0], res.requests


def sc_resolved(sc):
    from wadiloco.models.spec.resolve import resolve

    return resolve(sc)


def test_batch_invariants_fire_when_broken():
    client, q = _batch_run()
    arr, fin, b = q["arrival"].copy(), q["finish"].copy(), q["batch"].copy()
    client.check(arr, fin, b)
    with pytest.raises(InvariantError, match="requests"):
        client.check(arr[1:], fin[1:], b[1:])  # a request lost
    early = arr.copy()
    early[b == 3] -= 1e-3  # batch 3 starts before batch 2 ended
    with pytest.raises(InvariantError, match="before the previous"):
        client.check(early, fin, b)
    split = arr.copy()
    split[np.flatnonzero(b == 5)[0]] += 1e-3
    with pytest.raises(InvariantError, match="share"):
        client.check(split, fin, b)
    moved = b.copy()
    moved[np.flatnonzero(b == 5)[0]] = 6  # one request counted in the next batch
    with pytest.raises(InvariantError):
        client.check(arr, fin, moved)
    keep = b < 10  # the loop stopped early
    client.starts, client.index = client.starts[:10], int(keep.sum())
    with pytest.raises(InvariantError, match="stopped"):
        client.check(arr[keep], fin[keep], b[keep])


def test_users_invariants_fire_when_broken():
    sc = users(3)
    fl = Fleet(sc_resolved(sc), 0, latency=TINY, check=False)
    q = fl.run().requests
    client = fl.clients[0]
    client.check(q["arrival"], q["finish"], q["user"])
    arr = q["arrival"].copy()
    k = np.flatnonzero(q["user"] == 1)[3]
    arr[k] -= 1e-4  # sent before its previous request was answered
    with pytest.raises(InvariantError, match="two requests"):
        client.check(arr, q["finish"], q["user"])


# ---- the full simulator against the fit's fluid oracle ---------------------------------------------------


@pytest.mark.parametrize("name", ["vllm-1p5b-sync-heavy", "vllm-1p5b-pressure-heavy", "vllm-0p5b-baseline"])
def test_the_full_simulator_runs_a_stage10_loop_as_the_fit_does(name):
    """A Stage 10 run through the ordinary simulator (closed loop in the engine, the co-tenant as a GPU
    hold of weight w, an iteration law of L_u / O per iteration) starts its batches where the fit's
    fluid (models.testbed.fit, fluid.closed_loop) does: the twin the fit calibrates is the one that runs."""
    s, f = fit.run_spec(name)["settings"], fit.fit_run(name)
    outs = fit.outputs_of(s)
    o_ref = outs if isinstance(outs, int) else max(outs)
    lat = LatencyModel(f.l_u / o_ref, 0.0, 0.0, 0.0, r2=float("nan"), n=0, max_rel_err=float("nan"))
    tables = {
        "sync": {"kind": "periodic", "period_s": 37.0, "window_s": 8.0},
        "pressure": {"kind": "pressure", "period_s": 90.0},
    }
    tables["both"] = {"kind": "union", "of": [tables["pressure"], tables["sync"]]}
    out_spec = outs if isinstance(outs, int) else list(outs)
    sc = scenario(
        {
            "concurrency": {"kind": "steady", "c": s["concurrency"]},
            "prompts": s["prompts"],
            "output_tokens": out_spec,
            "start_delay_s": f.start_delay,
        },
        horizon_s=float(s["duration_s"]),
        drain_s=30.0,
        cotenant={"weight": f.weight, "timetable": tables[s["stress"]["mode"]]},
        merge={"phases": []},
    )
    q = run(sc, lat=lat).requests
    starts = np.unique(q["arrival"])
    b, _ = fit._batches(s, f.l_u, f.l_s, f.start_delay)
    assert len(starts) == len(b.start)
    np.testing.assert_allclose(starts, b.start, rtol=0, atol=1e-6)


# ---- the load a sweep matches closed-loop runs by ------------------------------------------------


def test_load_hash_matches_the_policies_of_a_seed_though_their_arrivals_differ():
    """Stage 12's bursty loop with sampled prompt lengths: merges switch the co-tenant on, so batches
    end (and the next start) at other times than under no_sync, and c(t) gives other batch sizes;
    what the clients send (the first requests' lengths in creation order) is the same, and differs
    on another seed. This is what the sweep's load check compares (experiments/protocol.load_check)."""
    sc = with_overrides(
        load_scenario(ROOT / "scenarios" / "testbed" / "stage12_bursty.yaml"),
        {"horizon_s": 150.0, "workload.prompts": {"mean": 300.0, "median": 200.0, "max": 2048}},
    )
    base, merged, other = (simulate(sc, s, policy=p).summary for s, p in ((0, "no_sync"), (0, None), (1, None)))
    assert base["merges"] == 0 < merged["merges"]
    assert base["arrivals_hash"] != merged["arrivals_hash"]
    assert base["load_hash"] == merged["load_hash"] != other["load_hash"]


def test_load_hash_covers_the_first_requests_in_creation_order():
    loop = clients.BatchLoop(clients.Concurrency.steady(3), lambda i, n: (np.arange(i, i + n), np.ones(n)), 0.0, 1.0)
    loop.head_prompt, loop.head_output = [], []
    for k in range(30):
        loop._note(np.arange(3 * k, 3 * k + 3), np.ones(3))
    assert loop.head_prompt == list(range(clients.HEAD))  # the first HEAD, then no more
    h = clients.load_hash([loop])
    loop.head_prompt[5] += 1
    assert clients.load_hash([loop]) != h
    loop.head_prompt[5] -= 1
    loop.horizon_s = 2.0
    assert clients.load_hash([loop]) != h  # the serving window is part of the load


def test_a_sweep_over_a_closed_loop_matches_its_loads(tmp_path):
    """The generic protocol on a closed-loop regime: no_sync and the replayed merges see other
    arrivals, yet every seed's load matches, so no verdict says "loads differ"."""
    sweep = {
        "name": "closed",
        "regimes": [str(ROOT / "scenarios" / "testbed" / "stage12_bursty.yaml")],
        "horizon_s": 80,
        "policies": [{"name": "no_sync"}, {"name": "replay", "params": {"schedule": "stage12_calibrated_replay"}}],
        "seeds": 2,
        "bootstrap": {"n_resamples": 199, "confidence": 0.95, "method": "percentile", "seed": 0},
    }
    path = tmp_path / "closed.yaml"
    path.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "--no-progress", "--no-figures"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs.groupby("seed")["arrivals_hash"].nunique().eq(2).all()  # the merges moved the arrivals
    assert pd.read_csv(out / "load_check.csv")["matched"].all()
    summ = pd.read_csv(out / "summary.csv")
    assert summ["load_match"].all() and not summ["verdict"].str.contains("loads differ").any()
