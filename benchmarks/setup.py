"""Per-run set-up: what one run pays outside the engine loop, and its SimPy events.

One run, as a sweep worker does it (experiments.sweep.worker.execute_task), split in parts:
  resolve_s    models.spec.load.resolve: the policy and workload resolved against the scenario;
  arrivals_s   sim.build.make_arrivals alone (the workload's draws, or a trace parsed), timed apart,
               its per-process cache emptied first; arrivals_shared_s the same call answered from it;
  fleet_s      sim.fleet.Fleet(...): arrivals (cache emptied), resources, sidecars, policy, trainer,
               monitor wired; fleet_shared_s the same with the seed's arrivals already drawn in
               this process (a sweep worker's matched-random draws and other policies on a seed);
  results_s    Fleet.run() minus its env.run: request table, summary, timeline (and checks if on);
  record_s     the worker's packing: censored latencies, models.results.metrics.run_record, JSON-able.
  setup_s_per_run = resolve_s + fleet_s + results_s + record_s (arrivals_s is inside fleet_s);
  run_s        env.run, for scale; events: SimPy events processed by env.run.
Reported for scenarios/bursty.yaml (its own policy) and for each regime of experiments/paper.yaml
(wa_diloco, seed 0, the paper's horizon): `setup_s_per_run` is bursty's, `setup_s_per_run_paper`
the mean over the paper's regimes. Medians of `runs` repetitions, in this process. Every part
is CPU time of this process (time.process_time; run_s too, env.run's), so that other processes on
a shared machine inflate it less than wall time; parent_s_per_run alone is wall time.

The sweep path around it (`sweep_path`):
  worker_overhead_s_per_run  experiments.sweep.worker.execute_task's time minus env.run's, plus
               the task's and the answer's pickling (the process boundary), over one seed of
               paper.yaml's bursty regime in the order a worker meets it (no_sync, wa_diloco, then
               matched_random draws), weighted as paper.yaml's runs are (per regime and seed: 1
               no_sync, 6 other policies, 40 matched-random draws); per kind beside it;
  parent_s_per_run / parent_cpu_s_per_run  the sweep parent's wall and CPU time per run:
               experiments.sweep.execute_plan over experiments/paper_quick.yaml's plan (its
               dependencies, 5 draws per reference and seed) on a backend that answers each task at
               once with a real paper-size answer (the no_sync run's packed latencies, a timeline
               where asked), pickled both ways: scheduling, payloads, results and the store's
               commits, without the workers' own time.
"""

from __future__ import annotations

import time

from wadiloco.benchmarks.bursty import BURSTY, ROOT, event_mark, median, processed_events

PAPER = ROOT / "experiments" / "paper.yaml"
PAPER_QUICK = ROOT / "experiments" / "paper_quick.yaml"
PARTS = ("resolve_s", "arrivals_s", "arrivals_shared_s", "fleet_s", "fleet_shared_s", "results_s", "record_s", "run_s")
CLOCK = time.process_time  # CPU seconds of this process: the machine's other load does not inflate them
PAPER_MIX = {"no_sync": 1, "policy": 6, "matched_random": 40}  # paper.yaml's runs per regime and seed


def time_parts(sc, seed: int = 0, policy: str | None = None) -> dict:
    """One run of `sc`, timed part by part (module docstring)."""
    from wadiloco.experiments.output import to_jsonable
    from wadiloco.models.results import metrics as M
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.sim import build
    from wadiloco.sim.fleet import Fleet

    t0 = CLOCK()
    r = resolve(sc, policy)
    t_resolve = CLOCK() - t0
    _forget_arrivals(build)  # cold: the draw itself (a trace is parsed at resolve, once per process)
    t0 = CLOCK()
    build.make_arrivals(r, seed)
    t_arrivals = CLOCK() - t0
    t0 = CLOCK()
    build.make_arrivals(r, seed)
    t_shared = CLOCK() - t0
    _forget_arrivals(build)
    t0 = CLOCK()
    fleet = Fleet(r, seed)
    t_fleet = CLOCK() - t0
    t0 = CLOCK()
    Fleet(r, seed)  # built, never run: what a fleet costs with its seed's arrivals drawn in this process
    t_fleet_shared = CLOCK() - t0
    mark = event_mark(fleet.env)
    with _EnvRunTimer() as env_run:
        t0 = CLOCK()
        res = fleet.run()
        t_run_all = CLOCK() - t0
    events = processed_events(fleet.env, mark)
    t0 = CLOCK()
    e2e = M.censored_e2e(res.requests["e2e"], res.requests["arrival"], float(res.summary.get(M.SIM_TIME, 0.0)))
    to_jsonable(M.run_record(res.summary, M.matched_latency(e2e, res.requests["merge"] >= 0, None, None, None)))
    t_record = CLOCK() - t0
    run_s = env_run.total
    parts = {
        "resolve_s": t_resolve,
        "arrivals_s": t_arrivals,
        "arrivals_shared_s": t_shared,
        "fleet_s": t_fleet,
        "fleet_shared_s": t_fleet_shared,
        "results_s": t_run_all - run_s,
        "record_s": t_record,
        "run_s": run_s,
    }
    parts["setup_s_per_run"] = parts["resolve_s"] + parts["fleet_s"] + parts["results_s"] + parts["record_s"]
    parts["setup_shared_s_per_run"] = parts["setup_s_per_run"] - parts["fleet_s"] + parts["fleet_shared_s"]
    parts["events"] = events
    return parts


def _forget_arrivals(build) -> None:
    """Empty sim.build's arrivals cache (a tree from before it has none: one benchmark, before and after)."""
    getattr(build, "_ARRIVALS", {}).clear()


def _median_parts(rows: list[dict]) -> dict:
    out = {k: median(r[k] for r in rows) for k in (*PARTS, "setup_s_per_run", "setup_shared_s_per_run")}
    out["events"] = rows[0]["events"]
    out["setup_fraction"] = out["setup_s_per_run"] / (out["setup_s_per_run"] + out["run_s"])
    return out


def run_setup_benchmark(runs: int, quick: bool = False) -> dict:
    from wadiloco.experiments.sweep import load_sweep
    from wadiloco.models.spec.load import load_scenario, with_overrides

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
    if PAPER.exists():
        result["sweep_path"] = sweep_path = {**worker_overhead(runs), **parent_per_run(runs)}
        for k in ("worker_overhead_s_per_run", "parent_s_per_run", "parent_cpu_s_per_run"):
            result[k] = sweep_path[k]
    return result


class _EnvRunTimer:
    """Sums the wall time of simpy.Environment.run while in use (the engine loop, apart)."""

    def __enter__(self):
        import simpy

        self.total, self.real, timer = 0.0, simpy.Environment.run, self

        def run(env, *a, **k):
            t0 = CLOCK()
            try:
                return timer.real(env, *a, **k)
            finally:
                timer.total += CLOCK() - t0

        simpy.Environment.run = run
        return self

    def __exit__(self, *exc):
        import simpy

        simpy.Environment.run = self.real


def _bursty_tasks(plan, seed: int, draws: int):
    """One seed of the plan's bursty regime in a worker's order: (kind, task key), no_sync first."""
    tasks = [t for t in plan.tasks() if t.regime == "bursty" and t.seed == seed]
    base = next(t for t in tasks if plan.arm(t.arm).name == "no_sync")
    ref = next(t for t in tasks if plan.arm(t.arm).name == "wa_diloco")
    matched = [t for t in tasks if t.ref_key == ref.key][:draws]
    return base, ref, matched


def worker_overhead(runs: int) -> dict:
    """The sweep worker's time outside env.run per run, over one seed of paper.yaml's bursty regime
    (module docstring); the payloads are the scheduler's own (experiments.sweep.scheduling)."""
    import pickle

    from wadiloco.experiments.sweep import load_sweep
    from wadiloco.experiments.sweep.scheduling import _baseline, _payload, _ref_counts
    from wadiloco.experiments.sweep.worker import execute_task

    plan = load_sweep(PAPER)
    base, ref, matched = _bursty_tasks(plan, 0, max(3, runs))
    per: dict[str, list[float]] = {k: [] for k in PAPER_MIX}

    def timed(kind: str, payload: dict) -> dict:
        with _EnvRunTimer() as env_run:
            t0 = CLOCK()
            res = pickle.loads(pickle.dumps(execute_task(pickle.loads(pickle.dumps(payload)))))
            wall = CLOCK() - t0
        if res["status"] != "ok":
            raise RuntimeError(f"sweep-path benchmark: {kind} failed: {res['error']}")
        per[kind].append(wall - env_run.total)
        return res

    b = timed("no_sync", _payload(plan, base, None, None))
    blob = _baseline(b["summary"], b["detail"])
    r = timed("policy", _payload(plan, ref, None, blob))
    for t in matched:
        timed("matched_random", _payload(plan, t, _ref_counts(r["summary"]), blob))
    kinds = {k: median(v) for k, v in per.items()}
    mean = sum(PAPER_MIX[k] * v for k, v in kinds.items()) / sum(PAPER_MIX.values())
    return {"worker_overhead_s_per_run": mean, "worker_overhead_s_by_kind": kinds}


class _AnsweringBackend:
    """A sweep backend that answers each task at once with a real answer of the right kind (pickled
    both ways, as through a process pool): the parent's own work, without the workers'."""

    name = "local"

    def __init__(self, answers: dict, workers: int = 2):
        self.answers, self.workers = answers, workers

    def submit(self, task):
        import concurrent.futures as cf
        import pickle

        pickle.dumps(task)
        a = self.answers
        res = dict(a["policy"], summary=a["summary"], timeline=a["timeline"] if task["timeline"] else None)
        res["detail"] = a["detail"] if task["keep_e2e"] else None
        f = cf.Future()
        f.set_result(pickle.loads(pickle.dumps(res)))
        return f

    def wait(self, handles):
        return list(handles)

    def result(self, h):
        return h.result()

    def close(self, cancel=False):
        pass


def parent_per_run(runs: int) -> dict:
    """The sweep parent's wall and CPU seconds per run over paper_quick.yaml's plan (module docstring)."""
    import shutil
    import tempfile
    from pathlib import Path
    from unittest import mock

    from wadiloco.experiments.sweep import load_sweep, scheduling
    from wadiloco.experiments.sweep.scheduling import _payload
    from wadiloco.experiments.sweep.worker import execute_task

    plan = load_sweep(PAPER_QUICK)
    base, _, _ = _bursty_tasks(plan, 0, 0)
    a = execute_task({**_payload(plan, base, None, None), "timeline": True})
    answers = {"policy": {"status": "ok", "wall_s": 1.0}, "summary": a["summary"]}
    answers.update(timeline=a["timeline"], detail=a["detail"])
    walls, cpus = [], []
    for _ in range(runs):
        tmp = Path(tempfile.mkdtemp(prefix="wadiloco-bench-parent-"))
        try:
            with mock.patch.object(scheduling, "make_backend", lambda *a, **k: _AnsweringBackend(answers)):
                t0, c0 = time.perf_counter(), time.process_time()
                oc = scheduling.execute_plan(plan, tmp / "out", workers=2, progress=False)
                walls.append((time.perf_counter() - t0) / oc.ran)
                cpus.append((time.process_time() - c0) / oc.ran)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {
        "parent_s_per_run": median(walls),
        "parent_cpu_s_per_run": median(cpus),
        "parent_plan": f"{PAPER_QUICK.relative_to(ROOT)} ({len(plan.tasks())} runs)",
    }
