"""`python -m wadiloco.benchmarks [--json] [--quick] [--runs N]`: how fast the simulator is, never asserted.

Reports, for scenarios/bursty.yaml with the scenario's own policy:
  realtime_factor_bursty  simulated seconds per wall second of Fleet.run(): env.run and the run's
                          results (request table, summary, timeline), fast-forward on;
  heapq_ratio             engine time over benchmarks/reference.py (plain heapq loop, same serving
                          model, one sidecar, no merges, same arrivals and latency model), same run,
                          the engine yielding a SimPy event at every step; heapq_ratio_lookahead the
                          same with its steps booked up to the end of the run (a fleet's lookahead
                          bound for an engine nothing else reads), so it is the engine's own time;
  fastforward_speedup     per-iteration stepping time over fast-forward time, same scenario;
  realtime_factor_bursty_kv / _router  the same with a KV pool that runs short (engine.kv_blocks
                          6000: preemptions) and prefix caching on (engine.prefix_cache, shared
                          system prompts), and with a router (least_outstanding), fast-forward on,
                          timed interleaved with the plain run (benchmarks/bursty.py KV, ROUTER);
  realtime_factor_bursty_pure / _kv_pure, compiled_speedup / _kv  with the compiled serving core
                          (setup.py, models/engine/_fast/), the same runs on the pure-Python core, interleaved,
                          and pure wall over compiled wall; serving_core says which core ran,
                          core_import_s what a fresh process pays to import it (`--pure`: pure only);
plus wall time, simulated seconds, SimPy events processed and events/s, engine iterations, and the
largest disagreement in per-request times between the modes and the reference (a sanity check;
tests/sim/test_queueing.py asserts it). One process, one thread: these measure one core.

Then (benchmarks/sweep_speed.py, benchmarks/memory.py; `--skip-sweep`, `--skip-memory` leave them out):
  sweep_runs_per_min_1w/_2w  experiments/smoke.yaml through experiments.sweep.execute_plan on 1 and
                          2 local worker processes: runs x 60 / wall seconds of the sweep phase
                          (pool start-up, runs, store writes; no report rendering);
  dask_efficiency_2w      runs/min of the same sweep on a running 2-worker Dask LocalCluster over
                          2 x runs/min on a running 1-worker one (clusters started and warmed before
                          the clock; start-up reported apart, and a cold figure beside it);
  paper_yaml_est_min_2w   an estimate of experiments/paper.yaml on 2 local workers, from per-regime
                          run times (see benchmarks/sweep_speed.py: paper_estimate);
  peak_rss_mb_1h_64sidecars  peak RSS (MiB) of a child process running a 1-hour azure_conv replay on
                          64 sidecars (8 islands x 8 hosts x 1), per-request table included.
And (benchmarks/setup.py; `--skip-setup` leaves it out):
  setup_s_per_run         what one bursty.yaml run pays outside env.run (resolve, fleet building with
                          the arrivals, request table and summary, the worker's record), with its
                          parts; setup_s_per_run_paper the mean over experiments/paper.yaml's regimes,
                          and events_per_run_paper their SimPy events per run;
  worker_overhead_s_per_run  a sweep worker's time per run outside env.run, pickling included, over
                          a seed of paper.yaml's bursty regime weighted as paper.yaml's runs;
  parent_s_per_run / parent_cpu_s_per_run  the sweep parent's wall / CPU time per run (scheduling,
                          payloads, results, store commits) over paper_quick.yaml's plan, workers
                          answering at once (benchmarks/setup.py).
And (benchmarks/share.py; `--skip-share` leaves it out):
  share_speedup_draws     per regime, a matched-random draw's CPU time without the seed's no_sync tapes
                          over its time with them (models.engine.tape), interleaved, with the recording run's
                          cost and the tapes' size; events_per_run_bursty_fixed: SimPy events of a
                          fixed-policy run asked at every step and planned ahead to its next merge.
And (benchmarks/traces.py; `--skip-traces` leaves it out):
  trace_load_s_azure/_mooncake  seconds to parse each real trace (warm page cache), with rows/s.
Every figure is the median of >= 3 runs (5 by default for the one-core figures, 3 for the rest).
`--quick` shrinks every size (240 s bursty window, 1-seed 120 s smoke sweep, 600 s memory replay,
one run per regime for the paper estimate); its figures are for smoke-testing the benchmark only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m wadiloco.benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="3 runs on a 240 s bursty window (two burst periods) instead of 5 runs on the full "
        "scenario; a 1-seed 120 s smoke sweep; a 600 s memory replay; 1 run per paper estimate",
    )
    ap.add_argument("--runs", type=int, default=None, help="repetitions per figure (>= 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-sweep", action="store_true", help="leave out the sweep and Dask figures")
    ap.add_argument("--skip-memory", action="store_true", help="leave out the 64-sidecar memory figure")
    ap.add_argument("--skip-traces", action="store_true", help="leave out the trace parsing figures")
    ap.add_argument("--skip-setup", action="store_true", help="leave out the per-run set-up figures")
    ap.add_argument("--skip-share", action="store_true", help="leave out the shared-tape figures")
    ap.add_argument(
        "--pure",
        action="store_true",
        help="run the pure-Python serving core only ($WADILOCO_PURE=1; models/engine/_fast/)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    runs = args.runs if args.runs is not None else (3 if args.quick else 5)
    if runs < 3:
        ap.error("--runs must be >= 3 (figures are medians of at least 3 runs)")
    if args.pure:
        os.environ["WADILOCO_PURE"] = "1"  # before the first import of models.engine._fast
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out = measure(args, runs)
    out["meta"] = meta(args, runs, load0, t0)
    if args.json:
        json.dump(out, sys.stdout, indent=2, default=float)
        sys.stdout.write("\n")
        return 0
    lines = engine_lines(out, runs) + sweep_lines(out)
    if "setup" in out:
        lines += setup_lines(out)
    lines += trace_lines(out)
    if "share" in out:
        lines += share_lines(out)
    print("\n".join(lines))
    return 0


def measure(args, runs: int) -> dict:
    """Every figure the flags ask for (module docstring)."""
    from wadiloco.benchmarks.bursty import run_all

    out = run_all(runs, 240.0 if args.quick else None, args.seed)
    other_runs = 3 if args.runs is None else runs  # slow figures: 3 runs unless told otherwise
    if not args.skip_sweep:
        from wadiloco.benchmarks.sweep_speed import paper_estimate, run_sweep_benchmarks

        sw = run_sweep_benchmarks(other_runs, quick=args.quick)
        out.update(sw)
        pe = paper_estimate(1 if args.quick else other_runs, sw["sweep_runs_per_min_1w"], sw["sweep_runs_per_min_2w"])
        if pe is not None:
            out.update(pe)
    if not args.skip_memory:
        from wadiloco.benchmarks.memory import run_memory_benchmark

        out.update(run_memory_benchmark(other_runs, quick=args.quick))
    if not args.skip_setup:
        from wadiloco.benchmarks.setup import run_setup_benchmark

        out.update(run_setup_benchmark(other_runs, quick=args.quick))
    if not args.skip_share:
        from wadiloco.benchmarks.share import run_share_benchmark

        out.update(run_share_benchmark(other_runs, args.seed, quick=args.quick))
    if not args.skip_traces:
        from wadiloco.benchmarks.traces import run_trace_benchmark

        out.update(run_trace_benchmark(runs))
    return out


def meta(args, runs: int, load0: float | None, t0: float) -> dict:
    """How the figures were taken: repetitions, interpreter, machine and its load."""
    import simpy

    return {
        "runs": runs,
        "quick": args.quick,
        "statistic": "median",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "simpy": simpy.__version__,
        "cpu_count": os.cpu_count(),
        "load_average_1m_before": load0,
        "load_average_1m_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "benchmark_wall_s": time.perf_counter() - t0,
    }


def engine_lines(out: dict, runs: int) -> list[str]:
    """The one-core figures: bursty.yaml fast-forward and per-iteration, the heapq reference, the cores."""
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
        f"  heapq_ratio {out['heapq_ratio']:.2f}   with the lookahead {out['heapq_ratio_lookahead']:.2f}   "
        f"per-iteration engine / reference "
        f"{h['heapq_ratio_per_iteration']:.2f}   "
        f"(max |engine - reference| {h['engine_vs_reference_max_diff_s']:.2g} s)",
        f"realtime_factor_bursty {out['realtime_factor_bursty']:.0f}   with a KV pool {b['kv']['params']} "
        f"({b['kv']['preemptions']} preemptions, prefix hit rate {b['kv']['prefix_hit_rate']:.3f}) "
        f"{out['realtime_factor_bursty_kv']:.0f}   with a router "
        f"{b['router']['params']} {out['realtime_factor_bursty_router']:.0f}",
    ]
    lines.append(f"serving core: {out['serving_core']} (import {out['core_import_s'] * 1e3:.0f} ms in a fresh process)")
    if "compiled_speedup" in out:
        lines.append(
            f"  pure-Python core in the same run: realtime_factor_bursty_pure {out['realtime_factor_bursty_pure']:.0f}"
            f"   _kv_pure {out['realtime_factor_bursty_kv_pure']:.0f}   compiled_speedup "
            f"{out['compiled_speedup']:.2f} (KV {out['compiled_speedup_kv']:.2f})"
        )
    return lines


def sweep_lines(out: dict) -> list[str]:
    """The sweep, Dask, paper-estimate and memory figures that ran."""
    lines = []
    if "sweep" in out:
        sw = out["sweep"]
        lines += [
            f"{sw['plan']} ({sw['tasks']} runs{', quick' if sw['quick'] else ''}), sweep phase:",
            f"  local 1 worker {sw['local_1w']['wall_s']:.1f} s   local 2 workers {sw['local_2w']['wall_s']:.1f} s"
            + (
                f"   dask 2 workers {sw['dask_2w']['wall_s']:.1f} s (cold), "
                f"{sw['dask_1w_warm']['wall_s']:.1f} / {sw['dask_2w_warm']['wall_s']:.1f} s on running 1- / 2-worker "
                f"clusters (start-up {out['dask_cluster_start_s']:.1f} s)"
                if "dask_2w" in sw
                else ""
            ),
            f"  sweep_runs_per_min_1w {out['sweep_runs_per_min_1w']:.1f}   "
            f"sweep_runs_per_min_2w {out['sweep_runs_per_min_2w']:.1f}"
            + (
                f"   dask_efficiency_2w {out['dask_efficiency_2w']:.2f} (cold {out['dask_efficiency_2w_cold']:.2f})"
                if "dask_efficiency_2w" in out
                else ""
            ),
        ]
    if "paper" in out:
        p = out["paper"]
        lines.append(
            f"{p['plan']}: {p['tasks']} runs, {p['serial_cpu_min']:.1f} min of runs in series; "
            f"paper_yaml_est_min_2w {out['paper_yaml_est_min_2w']:.1f} "
            f"(naive tasks / smoke runs-per-min: {p['naive_est_min_2w']:.1f})"
        )
    if "memory" in out:
        m = out["memory"]
        lines.append(
            f"{m['scenario']} {m['sidecars']} sidecars, {m['sim_s']:.0f} s simulated, {m['requests']} requests "
            f"(per-request table {m['request_table_mb']:.0f} MiB kept): "
            f"peak_rss_mb_1h_64sidecars {out['peak_rss_mb_1h_64sidecars']:.0f}  (wall {m['wall_s']:.1f} s, "
            f"real-time x{m['realtime_factor']:.0f})"
        )
    return lines


def trace_lines(out: dict) -> list[str]:
    return [
        f"trace {name}: {t['skipped']}"
        if "skipped" in t
        else f"trace {name}: {t['file']} ({t['file_mb']:.1f} MiB, {t['rows']} rows) parsed in {t['wall_s']:.3f} s, "
        f"{t['rows_per_s'] / 1e3:.0f}k rows/s: trace_load_s_{name} {t['wall_s']:.3f}"
        for name, t in out.get("traces", {}).items()
    ]


def share_lines(out: dict) -> list[str]:
    lines = ["matched-random draws with and without the seed's no_sync tapes (models.engine.tape), CPU per run:"]
    for name, p in out["share"].items():
        lines.append(
            f"  {name} ({p['merges']} merges): {p['draw_s_full']:.3f} s full, {p['draw_s_shared']:.3f} s shared: "
            f"share_speedup {p['share_speedup']:.2f}; recording the tapes {p['record_s']:.3f} s, {p['tape_mb']:.1f} MiB"
        )
    ev = out["events_per_run_bursty_fixed"]
    lines.append(
        f"bursty.yaml, fixed: {ev['asked_every_step']['events']} SimPy events asked at every step, "
        f"{ev['planned']['events']} planned ahead to its next merge"
    )
    return lines


def setup_lines(out: dict) -> list[str]:
    def row(name: str, p: dict) -> str:
        keys = ("resolve_s", "arrivals_s", "fleet_s", "results_s", "record_s")
        parts = "  ".join(f"{k[:-2]} {p[k] * 1e3:.1f}" for k in keys)
        return (
            f"  {name}: set-up {p['setup_s_per_run'] * 1e3:.1f} ms ({parts} ms; arrivals shared "
            f"{p['arrivals_shared_s'] * 1e3:.2f}, fleet with them {p['fleet_shared_s'] * 1e3:.1f}) "
            f"vs env.run {p['run_s']:.3f} s ({p['setup_fraction']:.1%}); {p['events']} events"
        )

    st = out["setup"]
    lines = [f"per-run set-up: setup_s_per_run {out['setup_s_per_run']:.3f}", row("bursty", st["bursty"])]
    if "paper" in st:
        lines.append(f"  setup_s_per_run_paper {out['setup_s_per_run_paper']:.3f} (mean over the paper's regimes)")
        lines += [row(name, p) for name, p in st["paper"].items()]
    if "sweep_path" in out:
        sp = out["sweep_path"]
        kinds = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sp["worker_overhead_s_by_kind"].items())
        lines.append(
            f"  sweep path per run: worker_overhead_s_per_run {sp['worker_overhead_s_per_run'] * 1e3:.1f} ms "
            f"({kinds} ms), parent_s_per_run {sp['parent_s_per_run'] * 1e3:.1f} ms "
            f"(cpu {sp['parent_cpu_s_per_run'] * 1e3:.1f} ms; {sp['parent_plan']})"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
