"""Peak memory of a 1-hour replay with 64 sidecars, measured in a fresh child process.

The run: scenarios/azure_conv.yaml (the Azure conversation trace, load 0.5 per sidecar) with
  fleet.islands = 8, fleet.hosts_per_island = 8, fleet.sidecars_per_host = 1   (64 sidecars),
  horizon_s = 3600, workload.loop = true (the trace, rescaled to 64 sidecars, is shorter than an
  hour, so it repeats), the scenario's own policy and drain,
built and run with sim.fleet.simulate, exactly as `wadiloco run` does. That includes building the
per-request table at the end (request_table: ~17 columns per request, every request of the hour),
which `wadiloco run` writes to requests.csv; it is kept, and its size is reported
(`request_table_mb`).

  peak_rss_mb_1h_64sidecars  the child's peak resident set size in MiB: getrusage(RUSAGE_SELF)
                             .ru_maxrss (kB on Linux), read by the child just before it exits;
                             the child also reports /proc/self/status VmHWM (the same figure) and
                             the parent also reports getrusage(RUSAGE_CHILDREN), the largest
                             over every child it has waited for, sweep workers included.
                             Median of `runs` children. It includes the interpreter, the
                             imports, the arrivals (all 64 sidecars' requests are drawn up
                             front) and the engines' state.

`python -m wadiloco.benchmarks.memory --child [--quick]` is the child; it prints one JSON line.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from wadiloco.benchmarks.bursty import ROOT, median

AZURE = ROOT / "scenarios" / "azure_conv.yaml"
OVERRIDES = {
    "fleet.islands": 8,
    "fleet.hosts_per_island": 8,
    "fleet.sidecars_per_host": 1,
    "horizon_s": 3600.0,
    "workload.loop": True,
}
QUICK_HORIZON_S = 600.0


def _vm_hwm_kb() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def child(quick: bool) -> dict:
    from wadiloco.models.spec.load import load_scenario, with_overrides
    from wadiloco.sim.fleet import simulate

    ov = dict(OVERRIDES)
    if quick:
        ov["horizon_s"] = QUICK_HORIZON_S
    sc = with_overrides(load_scenario(AZURE), ov)
    t0 = time.perf_counter()
    res = simulate(sc, 0)
    wall = time.perf_counter() - t0
    table_bytes = sum(v.nbytes for v in res.requests.values())
    s = res.summary
    return {
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "vm_hwm_kb": _vm_hwm_kb(),
        "wall_s": wall,
        "sim_s": s["sim_time_s"],
        "requests": s["requests"],
        "sidecars": sc.fleet.n_sidecars,
        "merges": s["merges"],
        "engine_iterations": s["engine_iterations"],
        "request_table_mb": table_bytes / 2**20,
        "request_table_columns": len(res.requests),
    }


def run_memory_benchmark(runs: int, quick: bool = False) -> dict:
    rs = []
    for _ in range(runs):
        cmd = [sys.executable, "-m", "wadiloco.benchmarks.memory", "--child"] + (["--quick"] if quick else [])
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if p.returncode != 0:
            raise RuntimeError(f"memory benchmark child failed ({p.returncode}): {p.stderr[-2000:]}")
        rs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    children_max_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # max over every child so far
    r0 = rs[0]
    return {
        "peak_rss_mb_1h_64sidecars": median(r["peak_rss_kb"] / 1024 for r in rs),
        "memory": {
            "scenario": str(AZURE.relative_to(ROOT)),
            "overrides": {**OVERRIDES, **({"horizon_s": QUICK_HORIZON_S} if quick else {})},
            "sidecars": r0["sidecars"],
            "sim_s": r0["sim_s"],
            "requests": r0["requests"],
            "merges": r0["merges"],
            "engine_iterations": r0["engine_iterations"],
            "wall_s": median(r["wall_s"] for r in rs),
            "realtime_factor": median(r["sim_s"] / r["wall_s"] for r in rs),
            "vm_hwm_mb": median(r["vm_hwm_kb"] / 1024 for r in rs) if r0["vm_hwm_kb"] else None,
            "peak_rss_mb_runs": [round(r["peak_rss_kb"] / 1024, 1) for r in rs],
            "request_table_mb": r0["request_table_mb"],
            "request_table_columns": r0["request_table_columns"],
            "note": "includes the per-request table built at the end of the run (request_table_mb)",
            "rusage_children_max_mb": children_max_kb / 1024,
        },
    }


if __name__ == "__main__":
    if "--child" in sys.argv:
        print(json.dumps(child("--quick" in sys.argv)))
    else:
        print(json.dumps(run_memory_benchmark(3, "--quick" in sys.argv), indent=2))
