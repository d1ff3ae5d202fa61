"""`python -m benchmarks [--json] [--quick] [--runs N]`: how fast the simulator is, never asserted.

Reports, for scenarios/bursty.yaml with the scenario's own policy:
  realtime_factor_bursty  simulated seconds per wall second (env.run only), fast-forward on;
  heapq_ratio             engine time over benchmarks/reference.py (plain heapq loop, same serving
                          model, one sidecar, no merges, same arrivals and latency model), same run;
  fastforward_speedup     per-iteration stepping time over fast-forward time, same scenario;
plus wall time, simulated seconds, SimPy events processed and events/s, engine iterations, and the
largest disagreement in per-request times between the modes and the reference (a sanity check;
tests/test_queueing.py asserts it). Every figure is the median of >= 3 runs (5 by default).
One process, one thread: it measures one core.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--quick", action="store_true",
                    help="3 runs on a 240 s window (two burst periods) instead of 5 runs on the full scenario")
    ap.add_argument("--runs", type=int, default=None, help="repetitions per figure (>= 3)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    runs = args.runs if args.runs is not None else (3 if args.quick else 5)
    if runs < 3:
        ap.error("--runs must be >= 3 (figures are medians of at least 3 runs)")
    horizon = 240.0 if args.quick else None

    import simpy

    from benchmarks.bursty import run_all

    t0 = time.perf_counter()
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out = run_all(runs, horizon, args.seed)
    out["meta"] = {
        "runs": runs, "quick": args.quick, "statistic": "median",
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "simpy": simpy.__version__, "cpu_count": os.cpu_count(),
        "load_average_1m_before": load0,
        "load_average_1m_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "benchmark_wall_s": time.perf_counter() - t0,
    }
    if args.json:
        json.dump(out, sys.stdout, indent=2, default=float)
        sys.stdout.write("\n")
        return 0
    b, h, it = out["bursty"], out["heapq"], out["bursty"]["per_iteration"]
    lines = [
        f"scenarios/bursty.yaml  policy={b['policy']} {b['policy_params']}  horizon {b['horizon_s']:g} s "
        f"+ drain {b['drain_s']:g} s  (median of {runs} runs)",
        f"  fast-forward   wall {b['wall_s']:.3f} s  sim {b['sim_s']:.0f} s  real-time x{b['realtime_factor']:.0f}  "
        f"{b['events']} events  {b['events_per_s'] / 1e3:.0f}k events/s  {b['engine_iterations']} iterations  "
        f"(setup {b['setup_s']:.2f} s)",
        f"  per-iteration  wall {it['wall_s']:.3f} s  real-time x{it['realtime_factor']:.0f}  {it['events']} events  "
        f"{it['events_per_s'] / 1e3:.0f}k events/s",
        f"  fastforward_speedup {out['fastforward_speedup']:.2f}   "
        f"(max |ff - per-iteration| per-request time {b['ff_vs_per_iteration_max_diff_s']:.2g} s)",
        f"one sidecar, no merges, {h['sidecar_streams']} arrival streams, {h['requests']} requests, "
        f"{h['engine_iterations']} iterations:",
        f"  engine ff {h['engine_ff_s']:.3f} s   engine per-iteration {h['engine_per_iteration_s']:.3f} s   "
        f"heapq reference {h['reference_s']:.3f} s ({h['reference_events_per_s'] / 1e3:.0f}k events/s)",
        f"  heapq_ratio {out['heapq_ratio']:.2f}   per-iteration engine / reference "
        f"{h['heapq_ratio_per_iteration']:.2f}   (max |engine - reference| {h['engine_vs_reference_max_diff_s']:.2g} s)",
        f"realtime_factor_bursty {out['realtime_factor_bursty']:.0f}",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
