"""Sweep throughput: experiments/smoke.yaml through the sweep API, on local workers and on Dask.

What is timed (one "sweep run"): `experiments.sweep.execute_plan(plan, <fresh temp dir>,
workers=N, backend=..., progress=False)`, i.e. the sweep phase only: starting the worker pool
(or the Dask LocalCluster), the workers' imports and latency fit, every run of the plan, and
writing every result to the SQLite store. Report rendering (`wadiloco report`: statistics,
bootstrap, figures) is not part of it. Each temp dir is removed afterwards.

  sweep_runs_per_min_Nw   runs recorded (`Outcome.ran`) x 60 / wall seconds of execute_plan,
                          local backend (spawned worker processes), N = 1, 2; median of `runs`;
  dask_efficiency_2w      median(runs/min on a running 2-worker Dask LocalCluster)
                          / (2 x median(runs/min on a running 1-worker Dask LocalCluster)):
                          how well the Dask backend scales from one worker to two. Each cluster
                          (1 thread per worker process) is started and its workers have imported
                          the simulator before the clock starts (`execute_plan(..., backend="dask",
                          scheduler=<its address>)` is timed), because start-up is paid once per
                          cluster, not per sweep; it is reported as `dask_cluster_start_s`.
                          Also reported, as `dask_efficiency_2w_cold`: a sweep that starts its own
                          2-worker LocalCluster, over 2 x the 1-local-worker figure (start-up inside).

Configurations are interleaved (1w, 2w, dask, 1w, ...) so a change in machine load hits all
alike. `quick` runs a smaller plan (one seed, 120 s horizons: 12 runs instead of 36).
Diagnostics per configuration: `run_wall_sum_s` (sum of the runs' own wall times, from the store)
and `busy_fraction` = run_wall_sum_s / (workers x sweep wall): what is not busy is start-up,
dispatch and store writes, or waiting for a dependency.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from wadiloco.benchmarks.bursty import ROOT, median

SMOKE = ROOT / "experiments" / "smoke.yaml"


def smoke_plan(quick: bool = False):
    from wadiloco.experiments.sweep import build_plan, load_sweep
    from wadiloco.experiments.sweep.spec import SweepSpec
    from wadiloco.models.spec.load import read_yaml, validate

    if not quick:
        return load_sweep(SMOKE)
    data = read_yaml(SMOKE)
    data.update({"seeds": 1, "horizon_s": 120, "timeline_seed": 0})
    return build_plan(validate(SweepSpec, data, SMOKE), SMOKE, SMOKE.parent)


def _warm_worker() -> None:
    """What a worker's first task would pay: the simulator's imports and the latency fit."""
    import wadiloco.experiments.runner  # noqa: F401
    import wadiloco.experiments.sweep.worker  # noqa: F401
    from wadiloco.models.engine.latency import default_latency

    default_latency()


def start_dask_cluster(workers: int):
    """A running LocalCluster whose workers have imported the simulator; (cluster, seconds)."""
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    )
    with Client(cluster) as client:
        client.run(_warm_worker)
    return cluster, time.perf_counter() - t0


def time_sweep(plan, workers: int, backend: str = "local", warm: bool = False) -> dict:
    """One timed sweep. `warm` (Dask only): on a cluster started and warmed before the clock."""
    from wadiloco.experiments.store import STORE_NAME
    from wadiloco.experiments.sweep import execute_plan

    tmp = Path(tempfile.mkdtemp(prefix=f"wadiloco-bench-{backend}{workers}-"))
    cluster = start_s = None
    try:
        if warm:
            cluster, start_s = start_dask_cluster(workers)
        t0 = time.perf_counter()
        oc = execute_plan(
            plan,
            tmp / "out",
            workers=workers,
            backend=backend,
            progress=False,
            scheduler=cluster.scheduler_address if cluster is not None else None,
        )
        wall = time.perf_counter() - t0
        # a diagnostic, not a figure: how much of the wall time workers spent inside runs
        with sqlite3.connect(tmp / "out" / STORE_NAME) as con:
            busy = float(con.execute("SELECT COALESCE(SUM(wall_s), 0) FROM runs").fetchone()[0])
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if oc.errors:
        raise RuntimeError(f"{oc.errors} of {oc.ran} sweep runs failed on {backend} x{workers}")
    return {
        "wall_s": wall,
        "ran": oc.ran,
        "runs_per_min": oc.ran * 60.0 / wall,
        "run_wall_sum_s": busy,
        "busy_fraction": busy / (workers * wall),
        "cluster_start_s": start_s,
    }


def run_sweep_benchmarks(runs: int, quick: bool = False, dask: bool = True) -> dict:
    plan = smoke_plan(quick)
    configs = [("local", 1, False), ("local", 2, False)]
    if dask:
        configs += [("dask", 2, False), ("dask", 1, True), ("dask", 2, True)]
    res: dict[tuple, list[dict]] = {c: [] for c in configs}
    for _ in range(runs):
        for backend, w, warm in configs:
            res[(backend, w, warm)].append(time_sweep(plan, w, backend, warm))

    def summ(rs):
        out = {
            "runs_per_min": median(r["runs_per_min"] for r in rs),
            "wall_s": median(r["wall_s"] for r in rs),
            "runs": rs[0]["ran"],
            "wall_s_runs": [round(r["wall_s"], 3) for r in rs],
            "run_wall_sum_s": median(r["run_wall_sum_s"] for r in rs),
            "busy_fraction": median(r["busy_fraction"] for r in rs),
        }
        if rs[0]["cluster_start_s"] is not None:
            out["cluster_start_s"] = median(r["cluster_start_s"] for r in rs)
        return out

    detail = {f"{b}_{w}w{'_warm' if warm else ''}": summ(rs) for (b, w, warm), rs in res.items()}
    out = {
        "sweep_runs_per_min_1w": detail["local_1w"]["runs_per_min"],
        "sweep_runs_per_min_2w": detail["local_2w"]["runs_per_min"],
    }
    if dask:
        out["dask_efficiency_2w"] = detail["dask_2w_warm"]["runs_per_min"] / (
            2.0 * detail["dask_1w_warm"]["runs_per_min"]
        )
        out["dask_efficiency_2w_cold"] = detail["dask_2w"]["runs_per_min"] / (2.0 * detail["local_1w"]["runs_per_min"])
        out["dask_cluster_start_s"] = detail["dask_2w_warm"]["cluster_start_s"]
    out["sweep"] = {
        "plan": str(SMOKE.relative_to(ROOT)),
        "quick": quick,
        "tasks": len(plan.tasks()),
        "timed": "experiments.sweep.execute_plan (pool/cluster start-up, runs, store writes; no report rendering)",
        "dask_efficiency_2w": "median runs/min on a running, warmed dask LocalCluster of 2 workers "
        "x 1 thread / (2 x the same on 1 worker); start-up reported apart",
        "dask_efficiency_2w_cold": "median runs/min, sweep starting its own 2-worker LocalCluster / "
        "(2 x median runs/min, 1 local worker)",
        **detail,
    }
    return out


# ---- experiments/paper.yaml on 2 cores: an estimate ------------------------------------------

PAPER = ROOT / "experiments" / "paper.yaml"


def _regime_runs(reg, plugins) -> tuple[float, float]:
    """Wall seconds of one seed-0 wa_diloco run of a regime and of one matched_random draw of it, as a
    sweep worker runs them (experiments.sweep.worker.execute_task)."""
    from wadiloco.experiments.sweep.worker import execute_task

    base = {"scenario": reg.scenario, "seed": 0, "draw": 0, "baseline": None, "keep_e2e": False}
    base.update(timeline=False, plugins=plugins)
    a = execute_task({**base, "policy": "wa_diloco", "params": {}, "reference": None})
    if a["status"] != "ok":
        raise RuntimeError(f"paper estimate: {reg.name} wa_diloco failed: {a['error']}")
    ref = {"merges": int(a["summary"]["merges"]), "steps": int(a["summary"]["inner_steps"])}
    b = execute_task(
        {**base, "policy": "matched_random", "params": {"reference": "wa_diloco"}, "draw": 1, "reference": ref}
    )
    if b["status"] != "ok":
        raise RuntimeError(f"paper estimate: {reg.name} matched_random failed: {b['error']}")
    return a["wall_s"], b["wall_s"]


def paper_estimate(runs: int, local_1w_rpm: float, local_2w_rpm: float) -> dict | None:
    """Minutes experiments/paper.yaml would take on 2 local workers, from measured run costs.

    Per regime, one seed-0 run of wa_diloco and one matched_random draw (the arm that is most of
    the plan) are timed in this process through experiments.sweep.worker.execute_task (what a worker
    does per task); median of `runs`. Then
        est_min = sum over tasks of (its regime's mean run time, matched_random or other)
                  / (2 x parallel efficiency) / 60,
    parallel efficiency = (smoke runs/min on 2 local workers) / (2 x smoke runs/min on 1), as
    measured above (it carries start-up and the two cores' contention). Also reported:
    the naive figure tasks / smoke runs-per-minute (smoke runs are 4 sidecars x 360 s, paper
    runs 8 sidecars x 600 s + drain, so it is optimistic)."""
    if not PAPER.exists():
        return None
    from wadiloco.experiments.sweep import load_sweep

    plan = load_sweep(PAPER)
    tasks = plan.tasks()
    per: dict[str, dict[str, list[float]]] = {r.name: {"policy": [], "matched": []} for r in plan.regimes}
    for _ in range(runs):
        for reg in plan.regimes:
            a, b = _regime_runs(reg, plan.plugins)
            per[reg.name]["policy"].append(a)
            per[reg.name]["matched"].append(b)
    cost = {r: {k: median(v) for k, v in d.items()} for r, d in per.items()}
    total = 0.0
    counts: dict[str, int] = {}
    for t in tasks:
        kind = "matched" if plan.arm(t.arm).name == "matched_random" else "policy"
        total += cost[t.regime][kind]
        counts[t.regime] = counts.get(t.regime, 0) + 1
    eff = min(1.0, local_2w_rpm / (2.0 * local_1w_rpm)) if local_1w_rpm > 0 else 1.0
    return {
        "paper_yaml_est_min_2w": total / (2.0 * eff) / 60.0,
        "paper": {
            "plan": str(PAPER.relative_to(ROOT)),
            "tasks": len(tasks),
            "tasks_per_regime": counts,
            "run_s_per_regime": {
                r: {"wa_diloco": c["policy"], "matched_random": c["matched"]} for r, c in cost.items()
            },
            "serial_cpu_min": total / 60.0,
            "parallel_efficiency_2w": eff,
            "naive_est_min_2w": len(tasks) / local_2w_rpm if local_2w_rpm > 0 else None,
            "method": "sum of per-regime run times (median of runs, execute_task in-process) / "
            "(2 x smoke 2-worker efficiency) / 60",
        },
    }
