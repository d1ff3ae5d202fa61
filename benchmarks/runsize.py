"""The run-size estimate against what runs do: per cost driver, a small run, its estimated counts next to
the run's own counters, and the estimated seconds (events x 10 us) next to the CPU seconds it took.

    python -m wadiloco.benchmarks.runsize [--json]

This is how the costs per item in models/spec/runsize.py were set (tests/spec/test_runsize.py holds the
counts to 0.8-1.25x of the runs'); the seconds are meant to err high, since the estimate's job is to
refuse runs of hours, not to predict seconds.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

EVENT_S = 10e-6
NO = {"policy": {"name": "no_sync"}}
CASES = {
    "closed_batches": {"horizon_s": 30, "drain_s": 20, **NO, "workload": {"kind": "closed_loop"}},
    "closed_users": {"horizon_s": 30, "drain_s": 20, **NO, "workload": {"kind": "closed_loop", "mode": "users"}},
    "host_cores": {"horizon_s": 30, "drain_s": 10, **NO, "fleet": {"host_cores": 4}},
    "fragments": {
        "horizon_s": 60,
        "merge": {"h_min": 8, "h_max": 16, "fragments": 64},
        "policy": {"name": "fixed", "params": {"H": 8}},
    },
    "disagg_backlog": {"horizon_s": 20, "drain_s": 200, **NO, "disagg": {"prefill_sidecars": list(range(7))}},
    "remote_kv_32": {
        "horizon_s": 12,
        "drain_s": 30,
        "fleet": {"islands": 32, "hosts_per_island": 2},
        "engine": {"prefix_cache": 8192, "shared_prefix": {"fraction": 0.8, "prompts": 3, "tokens": 2048}},
        "workload": {"kind": "normal", "load": 0.15},
        "remote_kv": {},
    },
    "router_64": {
        "horizon_s": 20,
        **NO,
        "fleet": {"islands": 8, "hosts_per_island": 2, "sidecars_per_host": 4},
        "router": {"name": "least_outstanding"},
    },
    "cotenant": {
        "horizon_s": 30,
        **NO,
        "cotenant": {"weight": 0.5, "timetable": {"kind": "periodic", "period_s": 0.05, "window_s": 0.02}, "poll_s": 0},
    },
}


def counters(fleet, res) -> dict:
    """What the run did, by the estimate's term names."""
    s = res.summary
    out = {"requests": s["requests"], "merges": s["merges"] * fleet.spec.merge.fragments}
    pre = sum(p.count for hr in fleet.res.hosts for p in hr.cpu.preempters)
    if pre:
        out["preemptions"] = pre
    if "disagg" in s:
        out["kv_flows"], out["fed_iterations"] = s["disagg"]["kv_transfers"], s["engine_iterations"]
        out["kv_flow_s"] = float(np.nansum(res.requests["kv_transfer_s"]))
    if "remote_kv" in s:
        out["kv_flows"], out["fed_iterations"] = s["remote_kv"]["fetches"], s["engine_iterations"]
        out["kv_flow_s"] = float(np.nansum(res.requests["kv_fetch_s"]))
    if "router" in s:
        out["routing"] = sum(s["router"]["routed"])
    if "cotenant" in s:
        out["cotenant"] = s["cotenant"]["windows"]
    return out


def measure(name: str, d: dict) -> dict:
    from wadiloco.models.spec.load import scenario_from_dict
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.models.spec.runsize import estimate
    from wadiloco.sim.fleet import Fleet

    spec = resolve(scenario_from_dict({"name": name, **d}))
    est = estimate(spec)
    t0 = time.process_time()
    fleet = Fleet(spec, 0)
    res = fleet.run()
    cpu = time.process_time() - t0
    got = counters(fleet, res)
    return {
        "counts": {k: (round(est.counts.get(k, 0.0), 1), v) for k, v in got.items()},
        "est_s": est.events * EVENT_S,
        "cpu_s": cpu,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wadiloco.benchmarks.runsize", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    out = {name: measure(name, d) for name, d in CASES.items()}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for name, r in out.items():
        counts = ", ".join(f"{k} {e:g} / {a:g}" for k, (e, a) in r["counts"].items())
        print(f"{name:16s} est {r['est_s']:7.2f} s / cpu {r['cpu_s']:6.2f} s   (estimated / run) {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
