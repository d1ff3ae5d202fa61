"""Benchmarks on scenarios/bursty.yaml: the whole fleet, and one sidecar against the heapq reference.

Timing rules: every figure is the median over `runs` repetitions; the runs of the modes being
compared are interleaved (A B A B ...) so a change in machine load hits both alike; inputs
(arrivals, latency fit) are built before the clock starts; one short untimed warm-up run comes first.
The fleet's wall is `Fleet.run()`: env.run and the run's results (request table, summary, timeline;
benchmarks/setup.py reports them apart as results_s). Building the fleet, which draws the arrivals,
is reported separately as `setup_s`.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

import wadiloco.models.engine.serving as pure_serving
import wadiloco.sim.build as sim_build
import wadiloco.sim.engine as sim_engine
from wadiloco.benchmarks.harness import run_engine
from wadiloco.benchmarks.reference import serve
from wadiloco.models.engine import _fast as core
from wadiloco.models.spec.load import Scenario, load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.sim.fleet import Fleet

ROOT = Path(__file__).resolve().parents[1]
BURSTY = ROOT / "scenarios" / "bursty.yaml"
# The engine-fidelity variants timed beside the plain run: a KV pool that runs short in
# the bursts (preemption) with prefix caching on (half the requests share one of 4 system prompts of
# 1,024 tokens; a cache of 32 blocks of 512 tokens, reserved out of the pool), and a router that
# hands over every arrival.
KV = {
    "engine.kv_blocks": 6000,
    "engine.prefix_cache": 16384,
    "engine.shared_prefix": {"fraction": 0.5, "prompts": 4, "tokens": 1024},
}
ROUTER = {"router.name": "least_outstanding"}


def median(xs) -> float:
    return float(statistics.median(xs))


def bursty_scenario(horizon_s: float | None = None) -> Scenario:
    sc = load_scenario(BURSTY)
    return with_overrides(sc, {"horizon_s": horizon_s}) if horizon_s else sc


def processed_events(env, start) -> int:
    """SimPy events processed since `start` = (next event id, queue length) taken before running.
    Every scheduled event takes an id from env._eid; those still queued were not processed."""
    eid0, q0 = start
    eid1 = next(env._eid)
    return (eid1 - eid0 - 1) - (len(env._queue) - q0)


def event_mark(env):
    return next(env._eid), len(env._queue)


def use_core(mod) -> None:
    """Run the engines on serving module `mod` (the compiled core's, or the pure models.engine.serving)."""
    sim_engine.EngineState, sim_engine.serve, sim_build.KVPool = mod.EngineState, mod.serve, mod.POOL
    sim_build.PrefixCache = mod.CACHE


def time_fleet(sc: Scenario, seed: int, mod=None) -> dict:
    use_core(mod or core.serving)
    t0 = time.perf_counter()
    fleet = Fleet(resolve(sc), seed)
    setup = time.perf_counter() - t0
    mark = event_mark(fleet.env)
    t0 = time.perf_counter()
    res = fleet.run()
    wall = time.perf_counter() - t0
    events = processed_events(fleet.env, mark)
    use_core(core.serving)
    s = res.summary
    return {
        "wall_s": wall,
        "setup_s": setup,
        "sim_s": float(fleet.env.now),
        "events": events,
        "engine_iterations": s["engine_iterations"],
        "requests": s["requests"],
        "merges": s["merges"],
        "result": res,
    }


def fleet_benchmark(sc: Scenario, runs: int, seed: int = 0) -> dict:
    """The fleet in fast-forward and in per-iteration mode, and fast-forward with a KV pool and with
    a router (KV, ROUTER), interleaved."""
    ff_sc = with_overrides(sc, {"engine.fast_forward": True})
    it_sc = with_overrides(sc, {"engine.fast_forward": False})
    kv_sc, rt_sc = with_overrides(ff_sc, KV), with_overrides(ff_sc, ROUTER)
    time_fleet(with_overrides(sc, {"horizon_s": min(30.0, sc.horizon_s)}), seed)  # warm-up (imports, fit)
    ff, it, kv, rt, ff_pure, kv_pure = [], [], [], [], [], []
    both = core.serving is not pure_serving  # the compiled core runs: time the pure one beside it
    for _ in range(runs):
        ff.append(time_fleet(ff_sc, seed))
        it.append(time_fleet(it_sc, seed))
        kv.append(time_fleet(kv_sc, seed))
        rt.append(time_fleet(rt_sc, seed))
        if both:
            ff_pure.append(time_fleet(ff_sc, seed, pure_serving))
            kv_pure.append(time_fleet(kv_sc, seed, pure_serving))
    # the two modes must agree (tests/sim/test_queueing.py checks this to 1e-9 s on shorter windows)
    diff = max_time_diff(ff[0]["result"].requests, it[0]["result"].requests)

    def summary(rs):
        return {
            "wall_s": median(r["wall_s"] for r in rs),
            "setup_s": median(r["setup_s"] for r in rs),
            "sim_s": rs[0]["sim_s"],
            "events": rs[0]["events"],
            "events_per_s": median(r["events"] / r["wall_s"] for r in rs),
            "realtime_factor": median(r["sim_s"] / r["wall_s"] for r in rs),
            "engine_iterations": rs[0]["engine_iterations"],
            "requests": rs[0]["requests"],
            "merges": rs[0]["merges"],
            "wall_s_runs": [round(r["wall_s"], 4) for r in rs],
        }

    out = {}
    if both:
        out["pure"] = {
            **summary(ff_pure),
            "same_requests": max_time_diff(ff[0]["result"].requests, ff_pure[0]["result"].requests) == 0,
        }
        out["kv_pure"] = summary(kv_pure)
        out["compiled_speedup"] = median(b["wall_s"] / a["wall_s"] for a, b in zip(ff, ff_pure))
        out["compiled_speedup_kv"] = median(b["wall_s"] / a["wall_s"] for a, b in zip(kv, kv_pure))
    return out | {
        "fast_forward": summary(ff),
        "per_iteration": summary(it),
        "kv": {
            **summary(kv),
            "params": KV,
            "preemptions": kv[0]["result"].summary["preemptions"],
            "prefix_hit_rate": kv[0]["result"].summary["prefix_hit_rate"],
        },
        "router": {**summary(rt), "params": ROUTER},
        "fastforward_speedup": median(b["wall_s"] / a["wall_s"] for a, b in zip(ff, it)),
        "ff_vs_per_iteration_max_diff_s": diff,
    }


def max_time_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for k in ("admitted", "first_token", "finish"):
        x, y = np.asarray(a[k], float), np.asarray(b[k], float)
        if not np.array_equal(np.isnan(x), np.isnan(y)):
            return float("inf")
        m = ~np.isnan(x)
        if m.any():
            worst = max(worst, float(np.max(np.abs(x[m] - y[m]))))
    return worst


def heapq_benchmark(sc: Scenario, runs: int, seed: int = 0) -> dict:
    """One sidecar, no merges: the engine (bare SimPy process, benchmarks/harness.py) against the
    heapq reference on the same arrivals and latency model. Each of the scenario's per-sidecar
    arrival streams is served on its own and the times are summed, so one measurement is long
    enough to time; the engine runs as the scenario configures it (fast-forward on) and also
    stepping one iteration at a time."""
    fleet = Fleet(resolve(sc), seed)  # only for its arrivals, latency model and host time
    streams = fleet.arrivals
    kw = dict(
        max_num_seqs=sc.engine.max_num_seqs,
        max_num_batched_tokens=sc.engine.max_num_batched_tokens,
        host_s=fleet.spec.engine.host_s,
    )
    lat = fleet.spec.engine.latency
    until = sc.horizon_s + sc.drain_s

    def engine(ff: bool, lookahead: bool = False):
        t0 = time.perf_counter()
        out = [run_engine(a, lat, fast_forward=ff, until=until, lookahead=lookahead, **kw) for a in streams]
        return time.perf_counter() - t0, out

    def reference():
        t0 = time.perf_counter()
        out = [serve(a.t, a.prompt, a.output, lat, until=until, **kw) for a in streams]
        return time.perf_counter() - t0, out

    engine(True), reference()  # warm-up
    t_ff, t_it, t_ref, t_la = [], [], [], []
    for _ in range(runs):
        dt, eng = engine(True)
        t_ff.append(dt)
        dt, ref = reference()
        t_ref.append(dt)
        dt, eng_it = engine(False)
        t_it.append(dt)
        dt, eng_la = engine(True, lookahead=True)
        t_la.append(dt)
    diff = 0.0
    for (sc_ff, _), (sc_it, _), (sc_la, _), r in zip(eng, eng_it, eng_la, ref):
        diff = max(diff, *(max_time_diff(vars(s), vars(r)) for s in (sc_ff, sc_it, sc_la)))
    ref_events = sum(r.events for r in ref)
    iterations = sum(r.iterations for r in ref)
    return {
        "sidecar_streams": len(streams),
        "requests": int(sum(len(a) for a in streams)),
        "engine_iterations": iterations,
        "engine_ff_s": median(t_ff),
        "engine_per_iteration_s": median(t_it),
        "reference_s": median(t_ref),
        "reference_events_per_s": median(ref_events / t for t in t_ref),
        "heapq_ratio": median(a / b for a, b in zip(t_ff, t_ref)),
        "heapq_ratio_per_iteration": median(a / b for a, b in zip(t_it, t_ref)),
        # the engine as a fleet runs it when nothing else reads it: no SimPy event per step
        "engine_lookahead_s": median(t_la),
        "heapq_ratio_lookahead": median(a / b for a, b in zip(t_la, t_ref)),
        "engine_vs_reference_max_diff_s": diff,
    }


def run_all(runs: int, horizon_s: float | None, seed: int = 0) -> dict:
    sc = bursty_scenario(horizon_s)
    fl = fleet_benchmark(sc, runs, seed)
    hq = heapq_benchmark(sc, runs, seed)
    ff = fl["fast_forward"]
    compiled = {"serving_core": core.KIND, "core_import_s": core_import_s()}
    if "pure" in fl:
        compiled |= {
            "realtime_factor_bursty_pure": fl["pure"]["realtime_factor"],
            "realtime_factor_bursty_kv_pure": fl["kv_pure"]["realtime_factor"],
            "compiled_speedup": fl["compiled_speedup"],
            "compiled_speedup_kv": fl["compiled_speedup_kv"],
        }
    return compiled | {
        "realtime_factor_bursty": ff["realtime_factor"],
        "realtime_factor_bursty_kv": fl["kv"]["realtime_factor"],
        "realtime_factor_bursty_router": fl["router"]["realtime_factor"],
        "heapq_ratio": hq["heapq_ratio"],
        "heapq_ratio_lookahead": hq["heapq_ratio_lookahead"],
        "fastforward_speedup": fl["fastforward_speedup"],
        "bursty": {
            "scenario": str(BURSTY.relative_to(ROOT)),
            "policy": sc.policy.name,
            "policy_params": dict(sc.policy.params),
            "horizon_s": sc.horizon_s,
            "drain_s": sc.drain_s,
            "seed": seed,
            **{k: v for k, v in ff.items()},
            "per_iteration": fl["per_iteration"],
            "kv": fl["kv"],
            "router": fl["router"],
            **({"pure": fl["pure"], "kv_pure": fl["kv_pure"]} if "pure" in fl else {}),
            "ff_vs_per_iteration_max_diff_s": fl["ff_vs_per_iteration_max_diff_s"],
        },
        "heapq": hq,
    }


def core_import_s() -> float:
    """Seconds a fresh process pays to import the serving core models.engine._fast selects (numpy, which
    both paths import anyway, first): the compiled module's load and digest check, or the pure one."""
    import subprocess
    import sys

    code = "import time, numpy; t0 = time.perf_counter(); import wadiloco.models.engine._fast; "
    code += "print(time.perf_counter() - t0)"
    out = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)]
    out += [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)]
    return min(out)
