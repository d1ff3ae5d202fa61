"""What a sweep worker process does: run one task and hand back plain, picklable, compact data.

Workers never touch the store; the parent process writes every result. A task is a dict
(scenario object, policy, params, seed, draw, reference counts, the no_sync run's packed
latencies, whether to keep the timeline and the latencies, plugin modules) and the answer is
{"status": "ok", "summary": ..., "timeline": ..., "detail": ...} or
{"status": "error", "error": "<exception text and the innermost frames>"}. A run's result depends
only on what is in the task, so any process on any backend gives the same answer. The figures
themselves are computed in models/results/metrics.py; this module only runs, compacts and packs.
"""

from __future__ import annotations

import math
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from wadiloco.experiments.output import to_jsonable
from wadiloco.experiments.sweep.plugins import load_plugins
from wadiloco.models.results import metrics as M

TIMELINE_MAX_POINTS = 2000


def _sig(x: float) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.6g}")


def compact_timeline(res) -> dict[str, Any]:
    """The timeline arrays (binned, at most TIMELINE_MAX_POINTS points), per-bin SLO violations
    by arrival time, and the merge windows, rounded to 6 significant digits."""
    tl = res.timeline
    t = np.asarray(tl["t"], dtype=float)
    if len(t) == 0:
        return {"t": [], "merges": []}
    dt = float(t[1] - t[0]) if len(t) > 1 else float(t[0]) or 1.0
    edges = np.concatenate([[t[0] - dt], t])
    req = res.requests
    viol = np.histogram(np.asarray(req["arrival"])[np.asarray(req["violated"], dtype=bool)], bins=edges)[0]
    cols = {
        "arrivals": np.asarray(tl["arrivals"], float),
        "violations": viol.astype(float),
        "queue": np.asarray(tl["queue"], float),
        "running": np.asarray(tl["running"], float),
        "merging": np.asarray(tl["merging"], float),
    }
    k = max(1, math.ceil(len(t) / TIMELINE_MAX_POINTS))
    if k > 1:
        n = len(t) // k * k
        t = t[k - 1 : n : k]
        cols = {
            c: (
                v[:n].reshape(-1, k).sum(axis=1)
                if c in ("arrivals", "violations")
                else v[:n].reshape(-1, k).mean(axis=1)
            )
            for c, v in cols.items()
        }
    out: dict[str, Any] = {"bin_s": _sig(dt * k), "t": [_sig(x) for x in t]}
    out.update({c: [_sig(x) for x in v] for c, v in cols.items()})
    out["merges"] = [[_sig(m.start), _sig(m.end)] for m in res.merges]
    return out


def pack_e2e(e2e: np.ndarray) -> bytes:
    return zlib.compress(np.ascontiguousarray(e2e, dtype="<f4").tobytes(), 6)


def unpack_e2e(blob: bytes) -> np.ndarray:
    return np.frombuffer(zlib.decompress(blob), dtype="<f4").astype(float)


_BASELINES: dict[bytes, np.ndarray] = {}  # the last few unpacked, by their packed bytes


def _baseline_e2e(blob: bytes) -> np.ndarray:
    """`unpack_e2e`, remembered: every other run on a (regime, seed) brings its no_sync run's latencies."""
    e2e = _BASELINES.pop(blob, None)
    if e2e is None:
        e2e = unpack_e2e(blob)
        e2e.setflags(write=False)
        while len(_BASELINES) >= 2:
            del _BASELINES[next(iter(_BASELINES))]
    _BASELINES[blob] = e2e
    return e2e


def _censored_e2e(res) -> np.ndarray:
    return M.censored_e2e(res.requests["e2e"], res.requests["arrival"], float(res.summary.get(M.SIM_TIME, 0.0)))


def _matched(res, e2e: np.ndarray, baseline: dict[str, Any] | None) -> dict[str, Any]:
    """This run's latencies against the no_sync run's on the same seed (see metrics.matched_latency),
    and what overlapping meant (`overlap_window`)."""
    base_e2e = _baseline_e2e(baseline["e2e"]) if baseline else None
    base_hash = baseline.get("arrivals_hash") if baseline else None
    overlaps, window = _overlaps(res, e2e)
    out = M.matched_latency(e2e, overlaps, res.summary.get(M.ARRIVALS_HASH), base_e2e, base_hash)
    if window == M.COTENANT_WINDOWS:  # the within-run figures too, on the windows (a closed loop has no match)
        out.update(M.split_p95(e2e, overlaps))
    return {**out, M.OVERLAP_WINDOW: window}


def _overlaps(res, e2e: np.ndarray) -> tuple[np.ndarray, str]:
    """Requests overlapping a merge; where merges act through a co-tenant's window after each merge
    (the testbed twin: merges that hold nothing), requests overlapping those windows."""
    wins = res.merge_windows
    if wins is None:
        return np.asarray(res.requests["merge"]) >= 0, M.MERGE_WINDOWS
    arrival = np.asarray(res.requests["arrival"], dtype=float)
    return M.window_overlaps(arrival, arrival + e2e, wins), M.COTENANT_WINDOWS


def execute_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one task; never raises (the error text goes back to the parent)."""
    t0 = time.perf_counter()
    try:
        load_plugins(task.get("plugins", ()))
        from wadiloco.experiments.runner import run_one, sharing_on

        res = run_one(
            task["scenario"],
            task["seed"],
            task["policy"],
            task["params"],
            task["draw"],
            reference=task.get("reference"),
            share=sharing_on(),  # the seed's no_sync tapes (experiments.runner): same results, less work
        )
        e2e = _censored_e2e(res)
        out = {
            "status": "ok",
            "summary": to_jsonable(M.run_record(res.summary, _matched(res, e2e, task.get("baseline")))),
            "timeline": compact_timeline(res) if task.get("timeline") else None,
            "detail": pack_e2e(e2e) if task.get("keep_e2e") else None,
        }
    except Exception as e:  # noqa: BLE001 - a failing run is data, not a crash of the sweep
        tb = traceback.extract_tb(e.__traceback__)[-3:]
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(tb))
        out = {"status": "error", "error": f"{type(e).__name__}: {e}" + (f" [at {where}]" if where else "")}
    out["wall_s"] = time.perf_counter() - t0
    return out
