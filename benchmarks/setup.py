"""Per-run set-up: what one run pays outside the engine loop (issue 16 item 4), and its SimPy events.

One run, as a sweep worker does it (experiments.sweep.worker.execute_task), split in parts:
  resolve_s    models.config.resolve: the policy and workload resolved against the scenario;
  arrivals_s   sim.build.make_arrivals alone (the workload's draws, or a trace parsed), timed apart;
  fleet_s      sim.fleet.Fleet(...): arrivals, resources, sidecars, policy, trainer, monitor wired;
  results_s    Fleet.run() minus its env.run: request table, summary, timeline (and checks if on);
  record_s     the worker's packing: censored latencies, models.metrics.run_record, JSON-able.
  setup_s_per_run = resolve_s + fleet_s + results_s + record_s (arrivals_s is inside fleet_s);
  run_s        env.run, for scale; events: SimPy events processed by env.run.
Reported for scenarios/bursty.yaml (its own policy) and for each regime of experiments/paper.yaml
(wa_diloco, seed 0, the paper's horizon): `setup_s_per_run` is bursty's, `setup_s_per_run_paper`
the mean over the paper's regimes. Medians of `runs` repetitions, in this process.
"""

from __future__ import annotations

import time

from wadiloco.benchmarks.bursty import BURSTY, ROOT, event_mark, median, processed_events

PAPER = ROOT / "experiments" / "paper.yaml"
PARTS = ("resolve_s", "arrivals_s", "fleet_s", "results_s", "record_s", "run_s")


def time_parts(sc, seed: int = 0, policy: str | None = None) -> dict:
    """One run of `sc`, timed part by part (module docstring)."""
    from wadiloco.experiments.output import to_jsonable
    from wadiloco.models import metrics as M
    from wadiloco.models.config import resolve
    from wadiloco.sim.build import engine_host_s, engine_latency, make_arrivals
    from wadiloco.sim.fleet import Fleet
    from wadiloco.sim.merge import resolve_weights

    t0 = time.perf_counter()
    r = resolve(sc, policy)
    t_resolve = time.perf_counter() - t0
    lat = engine_latency(r.scenario, None)
    host_s = engine_host_s(r.scenario, resolve_weights(r.scenario))
    t0 = time.perf_counter()
    fleet = Fleet(r, seed)
    t_fleet = time.perf_counter() - t0
    t0 = time.perf_counter()
    make_arrivals(r, seed, lat, host_s)  # after the fleet's own call: both find the same caches warm
    t_arrivals = time.perf_counter() - t0
    mark = event_mark(fleet.env)
    t0 = time.perf_counter()
    res = fleet.run()
    t_run_all = time.perf_counter() - t0
    events = processed_events(fleet.env, mark)
    t0 = time.perf_counter()
    e2e = M.censored_e2e(res.requests["e2e"], res.requests["arrival"], float(res.summary.get(M.SIM_TIME, 0.0)))
    to_jsonable(M.run_record(res.summary, M.matched_latency(e2e, res.requests["merge"] >= 0, None, None, None)))
    t_record = time.perf_counter() - t0
    run_s = res.summary["wall_time_s"]
    parts = {
        "resolve_s": t_resolve,
        "arrivals_s": t_arrivals,
        "fleet_s": t_fleet,
        "results_s": t_run_all - run_s,
        "record_s": t_record,
        "run_s": run_s,
    }
    parts["setup_s_per_run"] = parts["resolve_s"] + parts["fleet_s"] + parts["results_s"] + parts["record_s"]
    parts["events"] = events
    return parts


def _median_parts(rows: list[dict]) -> dict:
    out = {k: median(r[k] for r in rows) for k in (*PARTS, "setup_s_per_run")}
    out["events"] = rows[0]["events"]
    out["setup_fraction"] = out["setup_s_per_run"] / (out["setup_s_per_run"] + out["run_s"])
    return out


def run_setup_benchmark(runs: int, quick: bool = False) -> dict:
    from wadiloco.experiments.sweep import load_sweep
    from wadiloco.models.config import load_scenario, with_overrides

    bursty = load_scenario(BURSTY)
    regimes = load_sweep(PAPER).regimes if PAPER.exists() else []
    if quick:
        bursty = with_overrides(bursty, {"horizon_s": 120.0})
    time_parts(with_overrides(bursty, {"horizon_s": 20.0}))  # warm-up: imports, the latency fit
    out = {"bursty": _median_parts([time_parts(bursty) for _ in range(runs)])}
    paper = {}
    for reg in regimes:
        sc = with_overrides(reg.scenario, {"horizon_s": 120.0}) if quick else reg.scenario
        paper[reg.name] = _median_parts([time_parts(sc, 0, "wa_diloco") for _ in range(runs)])
    result = {"setup_s_per_run": out["bursty"]["setup_s_per_run"], "setup": out}
    if paper:
        result["setup_s_per_run_paper"] = sum(p["setup_s_per_run"] for p in paper.values()) / len(paper)
        result["events_per_run_paper"] = {name: p["events"] for name, p in paper.items()}
        out["paper"] = paper
    return result
