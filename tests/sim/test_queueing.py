"""Queueing-theory and oracle checks of the serving engine (sim/engine.py).

* M/M/1: one sidecar serving one request at a time with service time b * prompt is an FCFS single
  server; every request's times must equal the Lindley recursion's exactly, and the mean wait and
  sojourn must match the M/M/1 formulas within a tolerance taken from the spread of independent
  replications (numpy Lindley, no simulator involved).
* Little's law on a batching fleet, with the number in system integrated exactly from the
  per-request times; the monitor's sampled queue/running counts must agree with those times.
* Fast-forward (closed-form decode runs) and per-iteration stepping give the same per-request
  times on every scenario, including while merges contend for the GPU and host.
* The engine reproduces benchmarks/reference.py (a plain heapq loop of the same serving model).

No timing assertions here: speed lives in `python -m wadiloco.benchmarks`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wadiloco.benchmarks.harness import run_engine
from wadiloco.benchmarks.reference import serve
from wadiloco.models.engine.batching import EngineStep
from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.spec.load import Scenario, load_scenario, read_yaml, scenario_from_dict, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import Fleet, simulate

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
TIMES = ("admitted", "first_token", "finish")
ATOL = 1e-9  # seconds


def latency(a=0.0, b=0.0, c=0.0, d=0.0, e=0.0) -> LatencyModel:
    return LatencyModel(a, b, c, d, r2=1.0, n=0, max_rel_err=0.0, e=e, form="attention" if e else "linear")


def one_sidecar(horizon_s: float, drain_s: float, **engine) -> Scenario:
    """One island, one host, one sidecar, never merging; the trainer and monitor stay out of the way."""
    return scenario_from_dict(
        {
            "name": "one-sidecar",
            "horizon_s": horizon_s,
            "drain_s": drain_s,
            "fleet": {"islands": 1, "hosts_per_island": 1, "sidecars_per_host": 1},
            "engine": engine,
            "policy": {"name": "no_sync"},
            "training": {"step_time_s": 1.0e7},  # no inner step ends inside the run
            "monitor": {"sample_s": 100.0},
            "workload": {"kind": "normal"},  # unused when arrivals are injected
        }
    )


def assert_same_times(got: dict, want: dict, what: str, atol: float = ATOL) -> None:
    for k in TIMES:
        x, y = np.asarray(got[k], float), np.asarray(want[k], float)
        assert x.shape == y.shape, f"{what}: {k} has {x.shape} vs {y.shape} requests"
        nx, ny = np.isnan(x), np.isnan(y)
        assert np.array_equal(nx, ny), f"{what}: {k} done for different requests ({nx.sum()} vs {ny.sum()} NaN)"
        err = np.abs(x[~nx] - y[~ny])
        if err.size and err.max() > atol:
            i = int(np.flatnonzero(~nx)[int(err.argmax())])
            raise AssertionError(
                f"{what}: {k} differs by up to {err.max():.3g} s "
                f"(request {i}: {x[i]!r} vs {y[i]!r}; {(err > atol).sum()} requests off)"
            )


# =============================================================================================
# M/M/1


MU = 20.0  # services per second
MEAN_PROMPT = 10_000  # tokens; geometric, so b * prompt is exponential to within 1/(2*10^4)
B = 1.0 / (MU * MEAN_PROMPT)


def mm1_inputs(rho: float, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    t = np.cumsum(rng.exponential(1.0 / (rho * MU), n))
    prompt = rng.geometric(1.0 / MEAN_PROMPT, n).astype(np.int64)
    return t, prompt


def lindley(t: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FCFS single server, literally W_{n+1} = max(0, W_n + S_n - A_{n+1}): (start, finish)."""
    tl, sl = t.tolist(), s.tolist()
    start = [0.0] * len(tl)
    w = 0.0
    for i in range(len(tl)):
        if i:
            w = max(0.0, w + sl[i - 1] - (tl[i] - tl[i - 1]))
        start[i] = tl[i] + w
    start = np.asarray(start)
    return start, start + s


def lindley_means(t: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """Vectorised Lindley (W_n = S_n - min(0, min_{k<=n} S_k), S = partial sums of S_{n-1} - A_n):
    mean wait and mean sojourn. Only for the null distribution, where 1e-9 does not matter."""
    x = np.empty(len(t))
    x[0] = 0.0
    x[1:] = s[:-1] - np.diff(t)
    S = np.cumsum(x)
    w = S - np.minimum(np.minimum.accumulate(S), 0.0)
    return float(w.mean()), float((w + s).mean())


def run_mm1(t: np.ndarray, prompt: np.ndarray, fast_forward: bool = True):
    sc = one_sidecar(
        horizon_s=float(t[-1]) + 1.0,
        drain_s=1000.0,
        max_num_seqs=1,
        max_num_batched_tokens=1_000_000,
        host_overhead_s=0.0,
        cuda_graphs=True,
        fast_forward=fast_forward,
    )
    assert prompt.max() < sc.engine.max_num_batched_tokens  # no chunking
    arr = Arrivals(t, prompt, np.ones(len(t), dtype=np.int64))
    fleet = Fleet(resolve(sc), 0, arrivals=[arr], latency=latency(b=B))
    assert fleet.spec.engine.host_s == 0.0
    return fleet.run()


@pytest.mark.parametrize("fast_forward", [True, False])
def test_mm1_matches_lindley_exactly(fast_forward):
    rng = np.random.default_rng(11)
    t, prompt = mm1_inputs(0.8, 20_000, rng)
    r = run_mm1(t, prompt, fast_forward).requests
    assert np.array_equal(r["arrival"], t)  # one sidecar: the table keeps arrival order
    start, finish = lindley(t, B * prompt)
    assert r["completed"].all()
    assert_same_times(r, {"admitted": start, "first_token": finish, "finish": finish}, "engine vs Lindley")
    # The check is not vacuous: requests did queue, and the server did idle.
    assert (start > t + 1e-6).mean() > 0.5 and (start == t).mean() > 0.1


@pytest.mark.parametrize("rho,n", [(0.5, 100_000), (0.8, 200_000)])
def test_mm1_means_match_formula(rho, n):
    lam = rho * MU
    wq_theory, w_theory = rho / (MU - lam), 1.0 / (MU - lam)
    t, prompt = mm1_inputs(rho, n, np.random.default_rng(2024))
    r = run_mm1(t, prompt).requests
    assert r["completed"].all()
    wq, w = float(np.mean(r["admitted"] - r["arrival"])), float(np.mean(r["e2e"]))
    # exactness against the oracle on the same inputs
    assert (wq, w) == pytest.approx(lindley_means(t, B * prompt), rel=1e-9)
    # Spread of the estimators over independent replications of the same experiment (the waits are
    # strongly autocorrelated at rho = 0.8, so an iid standard error would be far too small).
    reps = []
    for seed in range(30):
        t_r, p_r = mm1_inputs(rho, n, np.random.default_rng(seed))
        reps.append(lindley_means(t_r, B * p_r))
    reps = np.asarray(reps)
    sd_wq, sd_w = reps.std(axis=0, ddof=1)
    assert sd_w < 0.05 * w_theory  # the experiment is long enough to say something
    assert abs(wq - wq_theory) < 4.5 * sd_wq, (wq, wq_theory, sd_wq)
    assert abs(w - w_theory) < 4.5 * sd_w, (w, w_theory, sd_w)
    # ... and the replications themselves centre on the formulas (the oracle is the right M/M/1)
    assert abs(reps[:, 1].mean() - w_theory) < 4.5 * sd_w / math.sqrt(len(reps)) + 0.002 * w_theory


# =============================================================================================
# Little's law


@pytest.fixture(scope="module")
def bursty_run():
    """Two on/off periods of the bursty scenario: 8 sidecars batching, real queues in the bursts."""
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 240.0, "drain_s": 60.0})
    return simulate(sc, seed=3)


def overlap(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)


@pytest.mark.parametrize(
    "stage,begin,end",
    [("system", "arrival", "finish"), ("queue", "arrival", "admitted"), ("batch", "admitted", "finish")],
)
def test_littles_law(bursty_run, stage, begin, end):
    r = bursty_run.requests
    assert r["completed"].all()
    assert len(np.unique(r["sidecar"])) > 1
    lo, hi = 20.0, 240.0
    T = hi - lo
    s, e = r[begin], r[end]
    L = float(overlap(s, e, lo, hi).sum() / T)  # exact time integral of the number in `stage`
    inside = (s >= lo) & (s < hi)
    lam = inside.sum() / T
    W = float(np.mean(e[inside] - s[inside]))
    assert L > 5.0, L  # a stage that actually holds requests
    assert L == pytest.approx(lam * W, rel=0.02), (stage, L, lam, W)


def test_monitor_counts_match_request_times(bursty_run):
    """The queue/running the policies observe equal the counts implied by the recorded times."""
    r, tl = bursty_run.requests, bursty_run.timeline
    ts = tl["t"]
    arr, adm, fin = r["arrival"], r["admitted"], r["finish"]
    queued = ((arr[None, :] <= ts[:, None]) & ~(adm[None, :] <= ts[:, None])).sum(axis=1)
    running = ((adm[None, :] <= ts[:, None]) & ~(fin[None, :] <= ts[:, None])).sum(axis=1)
    assert running.max() > 50 and queued.max() > 20  # batches fill, and queues form
    np.testing.assert_array_equal(tl["queue"], queued)
    np.testing.assert_array_equal(tl["running"], running)


# =============================================================================================
# fast-forward == per-iteration stepping


SEQUENTIAL = {
    "engine.step": "sequential",
    "engine.host_per_seq_s": 2.0e-5,
    "engine.host_per_token_s": 1.0e-7,
    "engine.frontend_per_request_s": 2.0e-4,
    "engine.frontend_per_token_s": 3.0e-5,
}
OVERLAPPED_FRONTEND = {"engine.frontend_per_request_s": 5.0e-4, "engine.frontend_per_token_s": 1.2e-4}
KV = {"engine.kv_blocks": 5000, "engine.merge_memory": "always", "fleet.colocation": "same_gpu"}
SHARED = {"fraction": 0.5, "prompts": 4, "tokens": 1024}
KV_PREFIX = {**KV, "engine.kv_blocks": 6000, "engine.prefix_cache": 16384, "engine.shared_prefix": SHARED}
# swap copies contend with merge staging on PCIe; merge buffers hold their blocks only while merging
KV_PREFIX_SWAP = {**KV_PREFIX, "engine.preemption": "swap", "engine.merge_memory": "merge"}
MERGY = {"horizon_s": 120.0, "drain_s": 40.0, "policy.name": "fixed", "policy.params": {"H": 32}, "merge.h_min": 32}
FF_CASES = [pytest.param(name, {}, id=name) for name in SCENARIOS] + [
    pytest.param("bursty", {"fleet.colocation": "same_gpu"}, id="bursty-same_gpu"),
    pytest.param("bursty", {"engine.cuda_graphs": False}, id="bursty-eager"),  # host-bound iterations
    pytest.param(
        "bursty", {"engine.max_num_seqs": 16, "engine.max_num_batched_tokens": 512}, id="bursty-small-batches"
    ),  # chunked prefill, full batches
    # two sidecars per host: merge work on the host must reach both engines' CPU paths
    pytest.param(
        "bursty",
        {"engine.cuda_graphs": False, "fleet.sidecars_per_host": 2, "fleet.islands": 2},
        id="bursty-eager-2-per-host",
    ),
    # engine generations: host work in series with the GPU's, host work that grows with the batch,
    # and a frontend path that binds an overlapped step when batches are large
    pytest.param("bursty", SEQUENTIAL, id="bursty-sequential-frontend"),
    pytest.param("bursty", OVERLAPPED_FRONTEND, id="bursty-overlapped-frontend"),
    # the attention latency form: chunks pay for attention over their prompt's cached context
    pytest.param(
        "bursty",
        {"engine.latency": "attention", "engine.max_num_seqs": 16, "engine.max_num_batched_tokens": 512},
        id="bursty-attention-small-batches",
    ),
    # KV-cache blocks that run short (preemption, recompute, admission waiting for blocks), merge
    # buffers shrinking the same_gpu pool: runs stop where the blocks do (models.engine.kv); with prefix
    # caching (models.engine.prefix): shared system prompts' blocks held once, in the cache's reservation of
    # the pool; hits skip prefill, admission pins, insertion evicts (LRU); swap preemption, its copies on
    # PCIe beside merge staging; merge buffers taking their blocks as merges start (a run in flight is
    # cut there) and giving them back as they end. (bursty-router-kv: recompute, no cache)
    pytest.param("bursty", KV_PREFIX_SWAP, id="bursty-kv-prefix-swap"),
    # a router hands each arrival over at its instant (idle engines wait for it, runs stop at it)
    pytest.param("bursty", {"router.name": "least_kv", "engine.kv_blocks": 5000}, id="bursty-router-kv"),
]


def _scenario_for(name: str, extra: dict):
    file = ROOT / "scenarios" / f"{name}.yaml"
    wl = read_yaml(file).get("workload", {})
    if wl.get("kind") == "trace" and not (file.parent / wl["path"]).is_file():
        pytest.skip(f"trace {wl['path']} not present (needs the shared folder next to the checkout)")
    return with_overrides(load_scenario(file), {**MERGY, **extra})


@pytest.mark.parametrize("name,extra", FF_CASES)
def test_fast_forward_is_exact(name, extra):
    sc = _scenario_for(name, extra)
    ff = simulate(with_overrides(sc, {"engine.fast_forward": True}), seed=1)
    it = simulate(with_overrides(sc, {"engine.fast_forward": False}), seed=1)
    assert ff.summary["merges"] >= 3, "the window should hold several merges"
    assert it.summary["contended_iterations"] > 0, "serving never met merge work: test is vacuous"
    assert ff.summary["requests"] == it.summary["requests"] > 100
    if "engine.kv_blocks" in extra:
        assert ff.summary["preemptions"] > 0, "the pool never ran short: test is vacuous"
    if extra.get("engine.preemption") == "swap":
        assert ff.summary["swap_blocks"] > 0, "nothing was swapped: test is vacuous"
    if "engine.prefix_cache" in extra:
        assert ff.summary["prefix_hit_rate"] > 0.1, "the prefix cache never hit: test is vacuous"
    assert_same_times(ff.requests, it.requests, f"{name} {extra}: fast-forward vs per-iteration")
    assert len(ff.merges) == len(it.merges)
    for a, b in zip(ff.merges, it.merges):
        assert a.step == b.step
        for p in b.phases:
            assert a.phases[p] == pytest.approx(b.phases[p], abs=ATOL), (a.index, p)
    # same work, counted the same way
    assert ff.summary["engine_iterations"] == it.summary["engine_iterations"]
    assert ff.summary["contended_iterations"] == it.summary["contended_iterations"]


# =============================================================================================
# running ahead of the SimPy clock (sim.engine.Lookahead) changes nothing, bit for bit


def _events(fleet: Fleet) -> tuple:
    """(the run's result, SimPy events scheduled while it ran)."""
    eid0 = next(fleet.env._eid)
    res = fleet.run()
    return res, next(fleet.env._eid) - eid0


LOOKAHEAD_CASES = FF_CASES + [
    # long gaps between decisions and samples (more room to run ahead), islands far out of step,
    # one island
    pytest.param(
        "bursty",
        {"monitor.sample_s": 7.3, "training.step_time_s": 0.2, "training.step_jitter": 0.5, "fleet.islands": 2},
        id="bursty-sparse-jittery",
    ),
    pytest.param("aperiodic", {"fleet.islands": 1}, id="aperiodic-1-island"),
]


@pytest.mark.parametrize("policy", ["wa_diloco", "online_forecast"])  # they act on what they observe
@pytest.mark.parametrize("name,extra", LOOKAHEAD_CASES)
def test_lookahead_is_bit_identical(name, extra, policy):
    sc = with_overrides(
        _scenario_for(name, extra), {"policy.name": policy, "policy.params": {}, "merge.h_max": 64}
    )  # merges every <= 32 s
    on, n_on = _events(Fleet(resolve(sc), 2, lookahead=True))
    off, n_off = _events(Fleet(resolve(sc), 2, lookahead=False))
    assert off.summary["merges"] >= 2 and off.summary["contended_iterations"] > 0, "no merge met serving"
    if "router.name" not in extra:  # (a router looks at the engines at every arrival: little room ahead)
        assert n_on < 0.8 * n_off, f"engines never ran ahead ({n_on} vs {n_off} events): test is vacuous"
    for k in off.requests:
        np.testing.assert_array_equal(on.requests[k], off.requests[k], err_msg=k)
    for k in off.timeline:
        np.testing.assert_array_equal(on.timeline[k], off.timeline[k], err_msg=k)
    assert on.decisions == off.decisions
    assert [(m.step, m.start, m.end, m.phases) for m in on.merges] == [
        (m.step, m.start, m.end, m.phases) for m in off.merges
    ]

    def summary(r):  # as text, so that a NaN equals a NaN
        return json.dumps({k: v for k, v in r.summary.items() if k != "wall_time_s"}, sort_keys=True, default=str)

    assert summary(on) == summary(off)


def test_running_past_a_decision_is_caught(monkeypatch):
    """The invariant behind the test above: no engine's state is ahead of an observation. A bound
    that forgets the policy's decisions must trip it."""
    from wadiloco.models.results.invariants import InvariantError
    from wadiloco.sim.training import Trainer

    sc = _scenario_for("bursty", {})  # (fixed: a planned policy, asked here at every step all the same)
    Fleet(resolve(sc), 2, check=True, plan_ahead=False).run()  # the real bound passes
    monkeypatch.setattr(Trainer, "next_decision_at", lambda self: math.inf)
    with pytest.raises(InvariantError, match="ran past an observation"):
        Fleet(resolve(sc), 2, check=True, plan_ahead=False).run()


# =============================================================================================
# the engine reproduces the heapq reference


REF_ENGINES = {
    "default": {},
    "chunked": {"max_num_seqs": 8, "max_num_batched_tokens": 256},
    "eager": {"cuda_graphs": False},
    "sequential": {k.removeprefix("engine."): v for k, v in SEQUENTIAL.items()},
    "sequential-chunked": {"max_num_seqs": 8, "max_num_batched_tokens": 256, "step": "sequential"},
    "frontend": {k.removeprefix("engine."): v for k, v in OVERLAPPED_FRONTEND.items()},
    "attention": {"latency": "attention"},
    "attention-chunked": {"max_num_seqs": 8, "max_num_batched_tokens": 256, "latency": "attention"},
    "table": {"latency": "table"},  # no line: every iteration stepped (fast-forward or not)
    "table-chunked": {"max_num_seqs": 8, "max_num_batched_tokens": 256, "latency": "table"},
}


def reference_step(e) -> dict:
    """The reference's names for an engine config's generation and host work."""
    return dict(
        sequential=e.step == "sequential",
        h1=e.host_per_seq_s,
        h2=e.host_per_token_s,
        fq=e.frontend_per_request_s,
        ft=e.frontend_per_token_s,
    )


@pytest.mark.parametrize("fast_forward", [True, False], ids=["ff", "per-iter"])
@pytest.mark.parametrize("engine", list(REF_ENGINES))
def test_engine_matches_reference(engine, fast_forward):
    sc = with_overrides(
        load_scenario(ROOT / "scenarios" / "bursty.yaml"),
        {
            "horizon_s": 150.0,
            "drain_s": 60.0,
            "policy.name": "no_sync",
            "policy.params": {},
            "fleet.islands": 1,
            "fleet.hosts_per_island": 1,
            "fleet.sidecars_per_host": 1,
            "engine.fast_forward": fast_forward,
            **{f"engine.{k}": v for k, v in REF_ENGINES[engine].items()},
        },
    )
    fleet = Fleet(resolve(sc), seed=5)
    res = fleet.run()
    assert res.summary["merges"] == 0 and res.summary["contended_iterations"] == 0
    arr = fleet.arrivals[0]
    ref = serve(
        arr.t,
        arr.prompt,
        arr.output,
        fleet.spec.engine.latency,
        max_num_seqs=sc.engine.max_num_seqs,
        max_num_batched_tokens=sc.engine.max_num_batched_tokens,
        host_s=fleet.spec.engine.host_s,
        until=sc.horizon_s + sc.drain_s,
        **reference_step(sc.engine),
    )
    assert len(arr) > 250 and res.requests["output"].max() > 1
    assert_same_times(res.requests, vars(ref), f"engine ({engine}, ff={fast_forward}) vs reference")
    assert res.summary["engine_iterations"] == ref.iterations


# Dyadic latencies and arrival times make every sum exact, so arrivals land exactly on iteration
# ends and several requests arrive at once: the tie rules of the two implementations must agree.
dyadic = st.integers(0, 8).map(lambda k: k / 256.0)


@st.composite
def small_workload(draw):
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    t = np.cumsum(np.asarray(gaps, float) / 64.0)
    prompt = np.asarray(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)), np.int64)
    output = np.asarray(draw(st.lists(st.integers(1, 60), min_size=n, max_size=n)), np.int64)
    lat = latency(
        a=draw(dyadic),
        b=draw(st.sampled_from([0.0, 2.0**-12, 2.0**-9])),
        c=draw(st.sampled_from([0.0, 2.0**-16, 2.0**-13])),
        d=draw(st.sampled_from([0.0, 2.0**-10])),
        e=draw(st.sampled_from([0.0, 2.0**-24])),
    )
    engine = dict(
        max_num_seqs=draw(st.integers(1, 12)),
        max_num_batched_tokens=draw(st.integers(16, 400)),
        host_s=draw(st.sampled_from([0.0, 2.0**-8, 2.0**-5])),
    )
    step = dict(
        sequential=draw(st.booleans()),
        h1=draw(st.sampled_from([0.0, 2.0**-11])),
        h2=draw(st.sampled_from([0.0, 2.0**-14])),
        fq=draw(st.sampled_from([0.0, 2.0**-7])),
        ft=draw(st.sampled_from([0.0, 2.0**-10])),
    )
    return Arrivals(t, prompt, output), lat, engine, step


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_workload())
def test_engine_matches_reference_on_ties(case):
    arr, lat, engine, step = case
    if lat.a + lat.b + lat.c + lat.d + engine["host_s"] == 0:
        lat = latency(a=2.0**-8)  # a zero-time iteration never ends anything
    ref = serve(arr.t, arr.prompt, arr.output, lat, check=True, **engine, **step)
    es = EngineStep(step["sequential"], step["h1"], step["h2"], step["fq"], step["ft"])
    assert not np.isnan(ref.finish).any()
    assert np.all(ref.admitted >= arr.t) and np.all(ref.first_token >= ref.admitted)
    assert np.all(ref.finish >= ref.first_token)
    for ff in (True, False):
        sc, _ = run_engine(arr, lat, fast_forward=ff, step=es, **engine)
        assert_same_times(vars(sc), vars(ref), f"ff={ff}", atol=0.0 if ff is False else ATOL)
        assert sc.iterations == ref.iterations


# =============================================================================================
# the engine's closed-form fast path under merge holds == the fabric's own max-min sharing

# Both stepping modes above use the same hold-share fast path (a sidecar whose GPU/host carry only
# merge holds runs at its constant share without joining the fabric), so they cannot disagree about
# it. Here the fast path is switched off for shared links (every contended iteration becomes fabric
# jobs) and the per-request times must not move.


@pytest.mark.parametrize(
    "name,extra",
    [
        pytest.param("bursty", {}, id="bursty"),
        pytest.param("bursty", {"engine.cuda_graphs": False}, id="bursty-eager"),
        pytest.param("sustained_sync_heavy", {}, id="sustained_sync_heavy"),  # same_gpu: outer step on the serving GPU
        pytest.param("bursty", SEQUENTIAL, id="bursty-sequential-frontend"),  # cut steps split in order h, g, f
        pytest.param("sustained_sync_heavy", SEQUENTIAL, id="sustained-sequential-frontend"),
    ],
)
def test_hold_fast_path_matches_fabric(monkeypatch, name, extra):
    import wadiloco.sim.engine

    sc = _scenario_for(name, extra)
    fast = simulate(sc, seed=2)
    monkeypatch.setattr(wadiloco.sim.engine, "hold_share", lambda *_a, **_k: None)
    fabric = simulate(sc, seed=2)
    assert fast.summary["merges"] >= 3 and fabric.summary["contended_iterations"] > 1000
    assert_same_times(fast.requests, fabric.requests, f"{name} {extra}: hold fast path vs fabric")
    assert fast.summary["engine_iterations"] == fabric.summary["engine_iterations"]


@pytest.mark.slow
def test_lookahead_past_the_horizon_with_timesliced_streaming():
    """The atlas cell shared_ts__streaming__bursty at load 0.175 (seed 0, wa_diloco): engines ran
    ahead to an island's step ending past the horizon, then another island started a short step
    that ended (and released the GPU) before that bound; the cut came with the engine ahead of the
    clock and crashed. Trainer.next_stop_at now says the horizon for islands still short of it."""
    from wadiloco.experiments.sweep.plan import load_sweep

    reg = next(
        r
        for r in load_sweep(ROOT / "experiments" / "atlas.yaml").regimes
        if r.name.startswith("shared_ts__streaming__bursty")
    )
    sc = with_overrides(reg.scenario, {"workload.load": 0.175, "policy.name": "wa_diloco", "policy.params": {}})
    on = Fleet(resolve(sc), 0, lookahead=True).run()
    off = Fleet(resolve(sc), 0, lookahead=False).run()
    for k in off.requests:
        np.testing.assert_array_equal(on.requests[k], off.requests[k], err_msg=k)
