"""What sharing work across the runs of a seed saves (models.engine.tape, experiments.runner).

For each regime: the matched-random draws of one seed against wa_diloco's merge budget, each run
with the seed's no_sync tapes and without, interleaved (A B A B ...), CPU time of the run itself
(`time.process_time`, building the fleet included); the no_sync run that records the tapes is timed
apart (a sweep's worker pays it once per (regime, seed), or not at all when it runs that no_sync
itself). Also: SimPy events of a fixed-policy run when the fleet asks the policy at every step and
when it plans ahead to the policy's next merge (sim.fleet Fleet.planned), and how much of the draws'
serving the tapes skipped.
"""

from __future__ import annotations

import pickle
import statistics
import time
from pathlib import Path

from wadiloco.benchmarks.bursty import event_mark, processed_events
from wadiloco.experiments.runner import run_one
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.sim.fleet import Fleet

ROOT = Path(__file__).resolve().parents[1]
REGIMES = ("bursty", "normal", "pressure_heavy")
MR = {"reference": "wa_diloco"}


def _timed_draw(r, seed: int, draw: int, ref: dict, tapes) -> tuple[float, Fleet]:
    t0 = time.process_time()
    f = Fleet(r, seed, draw=draw, reference_merges=ref["merges"], reference_steps=ref["steps"])
    if tapes is not None:
        f.share(tapes)
    f.run()
    return time.process_time() - t0, f


def share_regime(name: str, runs: int, seed: int, horizon: float | None) -> dict:
    sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    if horizon:
        sc = with_overrides(sc, {"horizon_s": horizon})
    res = run_one(sc, seed, "wa_diloco")
    ref = {"merges": res.summary["merges"], "steps": res.summary["inner_steps"]}
    t0 = time.process_time()
    base = Fleet(resolve(sc, "no_sync"), seed)
    base.share(None)
    base.run()
    record_s = time.process_time() - t0
    tapes = base.tapes()
    r = resolve(sc, "matched_random", MR)
    on, off, skipped = [], [], []
    for d in range(runs):
        t, f = _timed_draw(r, seed, d, ref, tapes)
        on.append(t)
        off.append(_timed_draw(r, seed, d, ref, None)[0])
        reps = [s.core.tape for s in f.sidecars if s.core.tape is not None]
        skipped.append(sum(x.jumps for x in reps))
    return {
        "merges": ref["merges"],
        "draw_s_shared": statistics.median(on),
        "draw_s_full": statistics.median(off),
        "share_speedup": statistics.median(off) / statistics.median(on),
        "record_s": record_s,
        "jumps_per_draw": statistics.median(skipped),
        "tape_mb": len(pickle.dumps(tapes)) / 2**20,
    }


def planned_events(seed: int, horizon: float | None) -> dict:
    sc = load_scenario(ROOT / "scenarios" / "bursty.yaml")  # its own policy: fixed H=256
    if horizon:
        sc = with_overrides(sc, {"horizon_s": horizon})
    out = {}
    for key, plan in (("asked_every_step", False), ("planned", True)):
        f = Fleet(resolve(sc), seed, plan_ahead=plan)
        mark = event_mark(f.env)
        t0 = time.process_time()
        f.run()
        out[key] = {"events": processed_events(f.env, mark), "cpu_s": time.process_time() - t0}
    return out


def run_share_benchmark(runs: int, seed: int = 0, quick: bool = False) -> dict:
    horizon = 240.0 if quick else None
    per = {name: share_regime(name, runs, seed, horizon) for name in (REGIMES[:1] if quick else REGIMES)}
    return {
        "share": per,
        "share_speedup_draws": {k: v["share_speedup"] for k, v in per.items()},
        "events_per_run_bursty_fixed": planned_events(seed, horizon),
    }
