"""Interference probe: the simulated twin of the H200 calibration's interference measurement (docs/sources.md).

One host, one sidecar with a fixed workload (decode B=64 at context 1024, or back-to-back
2048-token prefills), stepping one iteration at a time. A merge phase (the fleet's own
`MergeExecutor.run_phase`, repeated back to back like the measurement's loop) runs for `phase_s`
seconds; the slowdown of iteration i is its duration over the duration of the same iteration
in an identical run without the phase. Nothing here sets a ratio: it comes out of the fabric.
The `cpu` load is the measurement's one compressor thread per host core: CPU work on the host's
16 cores (the calibration host's `cpus`, sim.host) that presses on no path, so only oversubscription
(preemption of the engine's thread) can slow serving.
"""

from __future__ import annotations

import numpy as np

from wadiloco.models.engine.latency import load_calibration
from wadiloco.models.spec.resolve import from_dict
from wadiloco.models.spec.run import RunSpec
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import Fleet

MODES = {
    # name: (cuda_graphs, kind)
    "decode_graph_b64_ctx1024": (True, "decode"),
    "decode_eager_b64_ctx1024": (False, "decode"),
    "prefill_graph_2048": (True, "prefill"),
}
PHASE_SETS = {
    "stage": ("stage",),
    "outer": ("outer",),
    "ckpt": ("ckpt",),
    "all": ("stage", "outer", "ckpt"),
    "cpu": ("cpu",),
}


# Decode contexts grow by one token per iteration; starting the 64 sequences at 874 tokens puts
# the middle of the default window (t0=1.5 s, 1 s long) at about the measured context of 1024.
DECODE_PROMPT = 874


def _arrivals(kind: str) -> Arrivals:
    if kind == "decode":
        n = 64
        return Arrivals(np.zeros(n), np.full(n, DECODE_PROMPT, dtype=np.int64), np.full(n, 100_000, dtype=np.int64))
    n = 4000
    return Arrivals(np.zeros(n), np.full(n, 2048, dtype=np.int64), np.ones(n, dtype=np.int64))


def probe_scenario(mode: str, unlimited: tuple[str, ...] = (), params: float = 1.0e9) -> RunSpec:
    graphs, kind = MODES[mode]
    return from_dict(
        {
            "name": f"probe-{mode}",
            "horizon_s": 10.0,
            "drain_s": 0.0,
            "fleet": {
                "islands": 1,
                "hosts_per_island": 1,
                "sidecars_per_host": 1,
                "colocation": "same_gpu",
                "unlimited": list(unlimited),
                "host_cores": int(load_calibration()["cpus"]),
                "learner_threads_per_gpu": 0,  # the measurement had no training loop
            },
            "engine": {
                "cuda_graphs": graphs,
                "host_overhead_s": 0.0,
                "fast_forward": False,
                "max_num_seqs": 64 if kind == "decode" else 1,
                "max_num_batched_tokens": 65536 if kind == "decode" else 2048,
            },
            "training": {"params": params},
            "policy": {"name": "no_sync"},
            "workload": {"kind": "normal"},
        }
    )


def _run(mode: str, phases: tuple[str, ...], unlimited, t0: float, phase_s: float, seed: int = 0):
    f = Fleet(probe_scenario(mode, unlimited), seed=seed, arrivals=[_arrivals(MODES[mode][1])])
    side = f.sidecars[0]
    side.iter_log = []

    def loop(phase):
        yield f.env.timeout(t0)
        if phase == "cpu":  # one compressor thread per core, for the whole window
            host = f.res.hosts[0].cpu
            load = host.work(float("inf"), int(load_calibration()["cpus"]), 0.0, ("load", "cpu"))
            yield f.env.timeout(phase_s)
            host.stop(load)
            return
        while f.env.now < t0 + phase_s:
            yield from f.merge.run_phase(phase)

    for ph in phases:
        f.env.process(loop(ph))
    f.env.run(until=t0 + phase_s + 1.0)
    return np.array(side.iter_log)


def slowdown(
    mode: str, phase: str, unlimited: tuple[str, ...] = (), t0: float = 1.5, phase_s: float = 1.0, seeds: int = 1
) -> dict:
    """p50/p95/p99 of per-iteration slowdown while `phase` runs, against the same iterations alone,
    pooled over `seeds` runs (a random load, like `cpu`'s preemptions, needs many iterations for a
    p99; one window stays near the measured context, since decode contexts grow)."""
    base = _run(mode, (), unlimited, t0, phase_s)
    ratios, inside_n = [], 0
    for seed in range(seeds):
        hit = _run(mode, PHASE_SETS[phase], unlimited, t0, phase_s, seed)
        n = min(len(base), len(hit))
        dur_b = base[:n, 1] - base[:n, 0]
        dur_h = hit[:n, 1] - hit[:n, 0]
        inside = (hit[:n, 0] >= t0) & (hit[:n, 1] <= t0 + phase_s)
        ratios.append(dur_h[inside] / dur_b[inside])
        inside_n += int(inside.sum())
    if not inside_n:
        raise RuntimeError("no iteration fell inside the phase window")
    r = np.concatenate(ratios)
    return {
        "p50_ratio": float(np.percentile(r, 50)),
        "p95_ratio": float(np.percentile(r, 95)),
        "p99_ratio": float(np.percentile(r, 99)),
        "iterations": inside_n,
    }
