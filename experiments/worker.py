"""What a sweep worker process does: run one task and hand back plain, picklable data.

Workers never touch the store; the parent process writes every result. A task is a dict
(scenario object, policy, params, seed, draw, reference counts, whether to keep the timeline,
plugin modules) and the answer is {"status": "ok", "summary": ..., "timeline": ..., "detail": ...} or
{"status": "error", "error": "<exception text and the innermost frames>"}. A run's result depends
only on what is in the task, so any process on any backend gives the same answer.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import signal
import sys
import threading
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

import numpy as np

_LOADED: set[str] = set()
TIMELINE_MAX_POINTS = 2000


def load_plugins(plugins: tuple[str, ...] | list[str]) -> None:
    """Import extra policy modules (names or .py paths) once per process, so their `@register`
    runs in spawned and remote workers too."""
    for p in plugins:
        if p in _LOADED:
            continue
        try:
            if p.endswith(".py"):
                name = "wadiloco_plugin_" + Path(p).stem
                spec = importlib.util.spec_from_file_location(name, p)
                if spec is None or spec.loader is None:
                    raise ImportError(f"cannot load {p}")
                mod = importlib.util.module_from_spec(spec)
                sys.modules[name] = mod
                spec.loader.exec_module(mod)
            else:
                importlib.import_module(p)
        except Exception as e:  # noqa: BLE001 - reported as the user's input problem
            from wadiloco.models.errors import InputError

            raise InputError("$WADILOCO_PLUGINS", p, f"cannot import plugin: {type(e).__name__}: {e}") from None
        _LOADED.add(p)


def init_local_worker(parent_pid: int, plugins: tuple[str, ...]) -> None:
    """ProcessPoolExecutor initializer: leave Ctrl-C to the parent, exit if the parent dies (a
    SIGKILLed sweep must not leave orphans running), and import plugins up front."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    load_plugins(plugins)


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


def censored_e2e(res) -> np.ndarray:
    """End-to-end latency per request; an unfinished request counts until the end of the run."""
    req = res.requests
    end = float(res.summary.get("sim_time_s", 0.0))
    e2e = np.asarray(req["e2e"], dtype=float)
    return np.where(np.isfinite(e2e), e2e, end - np.asarray(req["arrival"], dtype=float))


def pack_e2e(e2e: np.ndarray) -> bytes:
    return zlib.compress(np.ascontiguousarray(e2e, dtype="<f4").tobytes(), 6)


def unpack_e2e(blob: bytes) -> np.ndarray:
    return np.frombuffer(zlib.decompress(blob), dtype="<f4").astype(float)


def matched_latency(res, baseline: dict[str, Any] | None) -> dict[str, Any]:
    """Common-random-numbers effect size: the p95 end-to-end latency of the requests that overlap a
    merge in this run, and of *the same requests* in the no_sync run on the same seed. Same arrivals
    (checked by hash) means same requests in the same order, so the ratio isolates what the merges
    did to them, free of the bias that long requests overlap merges more often."""
    out = {"e2e_p95_overlap_matched_s": None, "e2e_p95_overlap_baseline_s": None}
    if not baseline or res.summary.get("merges", 0) == 0:
        return out
    base = unpack_e2e(baseline["e2e"])
    mask = np.asarray(res.requests["merge"]) >= 0
    if baseline.get("arrivals_hash") != res.summary.get("arrivals_hash") or len(base) != len(mask) or not mask.any():
        return out
    out["e2e_p95_overlap_matched_s"] = float(np.percentile(censored_e2e(res)[mask], 95))
    out["e2e_p95_overlap_baseline_s"] = float(np.percentile(base[mask], 95))
    return out


def summary_record(summary: dict[str, Any]) -> dict[str, Any]:
    from wadiloco.experiments.output import to_jsonable

    s = {k: v for k, v in summary.items() if k != "wall_time_s"}
    return to_jsonable(s)


def execute_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one task; never raises (the error text goes back to the parent)."""
    t0 = time.perf_counter()
    try:
        load_plugins(task.get("plugins", ()))
        from wadiloco.experiments.runner import run_one

        res = run_one(
            task["scenario"],
            task["seed"],
            task["policy"],
            task["params"],
            task["draw"],
            reference=task.get("reference"),
        )
        summary = {**res.summary, **matched_latency(res, task.get("baseline"))}
        out = {
            "status": "ok",
            "summary": summary_record(summary),
            "timeline": compact_timeline(res) if task.get("timeline") else None,
            "detail": pack_e2e(censored_e2e(res)) if task.get("keep_e2e") else None,
        }
    except Exception as e:  # noqa: BLE001 - a failing run is data, not a crash of the sweep
        tb = traceback.extract_tb(e.__traceback__)[-3:]
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(tb))
        out = {"status": "error", "error": f"{type(e).__name__}: {e}" + (f" [at {where}]" if where else "")}
    out["wall_s"] = time.perf_counter() - t0
    return out
