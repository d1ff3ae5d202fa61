"""Execute a sweep plan on a backend, writing every finished run to the store as it arrives.

Backends: local worker processes (concurrent.futures, "spawn" context) or Dask (a LocalCluster
it starts, or an existing scheduler). Both take plain task dicts and return plain result dicts
(experiments.worker.execute_task), so results depend only on (scenario, policy, params, seed,
draw) and never on the backend, the worker count or the completion order.

Scheduling is dependency-aware: a matched control's draws are submitted as soon as its
reference run (same regime and seed) is stored, with that run's merge and inner-step counts. At
most 2 x workers tasks are in flight, so a sweep of any size keeps a bounded queue.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing as mp
import os
import sys
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wadiloco.experiments.output import prepare_dir
from wadiloco.experiments.store import STORE_NAME, Store
from wadiloco.experiments.sweep import Plan, Task
from wadiloco.experiments.worker import execute_task, init_local_worker
from wadiloco.models.errors import InputError

WORKER_DIED = "worker process died"
LOCK_NAME = ".wadiloco-sweep.lock"


class LocalBackend:
    name = "local"

    def __init__(self, workers: int, plugins: tuple[str, ...] = ()):
        self.workers = max(1, int(workers))
        self.plugins = plugins
        self.ex: cf.ProcessPoolExecutor | None = None
        self._start()

    def _start(self) -> None:
        self.ex = cf.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=mp.get_context("spawn"),
            initializer=init_local_worker,
            initargs=(os.getpid(), self.plugins),
        )

    def submit(self, task: dict[str, Any]):
        try:
            return self.ex.submit(execute_task, task)
        except cf.process.BrokenProcessPool:
            self._kill()
            self._start()
            return self.ex.submit(execute_task, task)

    def wait(self, handles) -> list:
        done, _ = cf.wait(handles, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, h) -> dict[str, Any]:
        try:
            return h.result()
        except cf.process.BrokenProcessPool as e:
            return {"status": "error", "error": f"{WORKER_DIED} ({e})", "died": True}
        except Exception as e:  # noqa: BLE001 - e.g. an unpicklable result
            return {"status": "error", "error": f"{type(e).__name__}: {e}"}

    def _kill(self) -> None:
        if self.ex is None:
            return
        procs = list(getattr(self.ex, "_processes", {}).values())  # the workers this pool started
        self.ex.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)

    def close(self, cancel: bool = False) -> None:
        if self.ex is None:
            return
        if cancel:
            self._kill()
        else:
            self.ex.shutdown(wait=True)
        self.ex = None


class DaskBackend:
    name = "dask"

    def __init__(self, workers: int, scheduler: str | None = None, plugins: tuple[str, ...] = ()):
        try:
            from distributed import Client, LocalCluster
        except ImportError as e:  # pragma: no cover - dask is a dependency
            raise InputError("<command line>", "--backend", f"dask.distributed is not installed ({e})") from None
        self.cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout="15s")
            except (OSError, TimeoutError, ValueError) as e:
                raise InputError(
                    "<command line>", "--scheduler", f"cannot connect to the Dask scheduler at {scheduler}: {e}"
                ) from None
            self.workers = max(1, sum(self.client.nthreads().values()))
        else:
            self.cluster = LocalCluster(
                n_workers=max(1, int(workers)),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
            self.workers = max(1, int(workers))

    def submit(self, task: dict[str, Any]):
        return self.client.submit(execute_task, task, pure=False)

    def wait(self, handles) -> list:
        from distributed import wait

        return list(wait(handles, return_when="FIRST_COMPLETED").done)

    def result(self, h) -> dict[str, Any]:
        try:
            return h.result()
        except Exception as e:  # noqa: BLE001 - KilledWorker, CommClosedError, ...
            return {"status": "error", "error": f"{type(e).__name__}: {e}"}

    def close(self, cancel: bool = False) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


@dataclass
class Outcome:
    total: int
    skipped: int
    ran: int
    ok: int
    errors: int
    backend: str
    workers: int


def acquire_lock(out: Path):
    import fcntl

    try:
        fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise InputError(
            out, "--out", f"output folder is not writable (cannot create the lock file {LOCK_NAME}: {e.strerror or e})"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise InputError(out, "--out", "another sweep is writing to this folder right now") from None
    return fd


def open_store_for(plan: Plan, out: Path, resume: bool) -> Store:
    store = Store(out / STORE_NAME)
    ident = store.identity()
    if ident is None:
        store.set_plan(plan.identity(), plan.describe())
    elif ident != plan.identity():
        old = store.plan()
        store.close()
        raise InputError(
            out,
            "--out",
            f"already holds the results of a different sweep ({old.get('name')!r} from "
            f"{old.get('file')}, other regimes, policies, params or seeds); choose "
            f"another output folder or remove this one",
        )
    elif not resume:
        c = store.counts()
        store.close()
        raise InputError(
            out,
            "--resume",
            f"already holds this sweep's results ({c.get('ok', 0)} completed, "
            f"{c.get('error', 0)} failed runs); pass --resume to continue it",
        )
    else:
        store.set_plan(ident, plan.describe())  # analysis settings (bootstrap, gate) may have changed
    return store


def _payload(plan: Plan, t: Task, ref: dict[str, Any] | None, base: dict[str, Any] | None) -> dict[str, Any]:
    reg, arm = plan.regime(t.regime), plan.arm(t.arm)
    return {
        "scenario": reg.scenario,
        "policy": arm.name,
        "params": arm.params,
        "seed": t.seed,
        "draw": t.draw,
        "reference": ref,
        "baseline": base,
        "keep_e2e": t.base_key is None,
        "timeline": t.seed == plan.timeline_seed and t.draw == 0,
        "plugins": plan.plugins,
    }


def _ref_counts(summary: dict[str, Any]) -> dict[str, int]:
    return {"merges": int(summary["merges"]), "steps": int(summary["inner_steps"])}


def _baseline(summary: dict[str, Any] | None, blob: bytes | None) -> dict[str, Any] | None:
    if not summary or blob is None:
        return None
    return {"e2e": blob, "arrivals_hash": summary.get("arrivals_hash")}


def execute_plan(
    plan: Plan,
    out: str | Path,
    *,
    workers: int | None = None,
    backend: str = "local",
    scheduler: str | None = None,
    resume: bool = False,
    progress: bool = True,
) -> Outcome:
    out_existed = Path(out).exists()
    out = prepare_dir(out)
    lock = acquire_lock(out)
    fresh = not (out / STORE_NAME).exists()
    ok = False
    try:
        from wadiloco.experiments.report import remove_stale_temps

        remove_stale_temps(out)  # temp files of outputs a killed sweep or report was writing
        store = open_store_for(plan, out, resume)
        try:
            oc = _run(plan, store, workers or os.cpu_count() or 1, backend, scheduler, progress)
            ok = True
            return oc
        finally:
            empty = fresh and not store.counts()
            store.close()
            if not ok and empty:
                _remove_empty_store(out, remove_dir=not out_existed)
    finally:
        os.close(lock)


def _remove_empty_store(out: Path, remove_dir: bool) -> None:
    """A sweep that failed before recording any run (e.g. no Dask scheduler) leaves nothing behind."""
    for name in (STORE_NAME, STORE_NAME + "-wal", STORE_NAME + "-shm", STORE_NAME + "-journal", LOCK_NAME):
        try:
            (out / name).unlink()
        except OSError:
            pass
    if remove_dir:
        try:
            out.rmdir()
        except OSError:
            pass


def _run(plan: Plan, store: Store, workers: int, backend: str, scheduler: str | None, progress: bool) -> Outcome:
    """Dependencies: a run needs its reference run (if any) to have succeeded, and the no_sync run
    of its (regime, seed) to have finished (ok: its per-request latencies come along for the
    common-random-numbers comparison; failed: the run goes ahead without them)."""
    tasks = plan.tasks()
    order = {t.key: i for i, t in enumerate(tasks)}
    by_key = {t.key: t for t in tasks}
    status = store.status()
    todo = [t for t in tasks if status.get(t.key) != "ok"]
    todo_keys = {t.key for t in todo}
    outcome = Outcome(len(tasks), len(tasks) - len(todo), 0, 0, 0, backend, workers)
    if not todo:
        return outcome

    summaries: dict[tuple, dict | None] = {}  # finished dependency -> its summary (None: it failed)
    blobs: dict[tuple, bytes | None] = {}
    blockers: dict[tuple, set] = {}
    dependents: dict[tuple, list[tuple]] = defaultdict(list)
    for t in todo:
        deps = {k for k in (t.ref_key, t.base_key) if k is not None}
        for k in deps:
            if k in todo_keys:
                dependents[k].append(t.key)
            elif k not in summaries:  # done in an earlier session
                summaries[k] = store.summary(k)
                if k == t.base_key:
                    blobs[k] = store.detail(k)
        blockers[t.key] = {k for k in deps if k in todo_keys}
    remaining_users: dict[tuple, int] = defaultdict(int)  # pending tasks that still need a dependency's data
    for t in todo:
        for k in (t.ref_key, t.base_key):
            if k is not None:
                remaining_users[k] += 1
    # Dependencies first (baselines, then references), then everything else, in plan order.
    rank = {k: (0 if by_key[k].base_key is None else 1) for k in dependents}
    ready: deque = deque(sorted((t.key for t in todo if not blockers[t.key]), key=lambda k: (rank.get(k, 2), order[k])))

    from tqdm import tqdm

    bar = tqdm(
        total=len(tasks),
        initial=outcome.skipped,
        unit="run",
        desc="sweep",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
        mininterval=0.5,
        smoothing=0.1,
    )
    be = LocalBackend(workers, plan.plugins) if backend == "local" else DaskBackend(workers, scheduler, plan.plugins)
    window = 2 * be.workers
    inflight: dict[Any, tuple[tuple, dict | None, int]] = {}

    def release(k: tuple) -> None:
        remaining_users[k] -= 1
        if remaining_users[k] <= 0:
            blobs.pop(k, None)

    finished: set[tuple] = set()

    def finish(key: tuple, ref, res: dict[str, Any]) -> None:
        finished.add(key)
        t = by_key[key]
        arm = plan.arm(t.arm)
        store.record(key, t.regime, arm.name, arm.params, res, ref)
        outcome.ran += 1
        if res.get("status") == "ok":
            outcome.ok += 1
        else:
            outcome.errors += 1
            bar.set_postfix(failed=outcome.errors, refresh=False)
        bar.update(1)
        if key in dependents:
            ok = res.get("status") == "ok"
            summaries[key] = res.get("summary") if ok else None
            if t.base_key is None:
                blobs[key] = res.get("detail") if ok else None
            for dk in dependents.pop(key):
                if dk in finished:  # already skipped (its reference failed)
                    continue
                d = by_key[dk]
                if d.ref_key == key and not ok:
                    release(key)
                    if d.base_key is not None:
                        release(d.base_key)
                    blockers[dk].discard(key)
                    finish(
                        dk,
                        None,
                        {
                            "status": "error",
                            "error": f"skipped: its reference run ({plan.arm(d.arm).reference}, seed {d.seed}) failed",
                        },
                    )
                    continue
                blockers[dk].discard(key)
                if not blockers[dk]:
                    ready.append(dk)

    cancelled = True
    try:
        while ready or inflight:
            while ready and len(inflight) < window:
                k = ready.popleft()
                t = by_key[k]
                if t.ref_key is not None and summaries.get(t.ref_key) is None:
                    for dk in (t.ref_key, t.base_key):
                        if dk is not None:
                            release(dk)
                    finish(
                        k,
                        None,
                        {
                            "status": "error",
                            "error": f"skipped: its reference run "
                            f"({plan.arm(t.arm).reference}, seed {t.seed}) "
                            f"has no result",
                        },
                    )
                    continue
                ref = _ref_counts(summaries[t.ref_key]) if t.ref_key is not None else None
                base = _baseline(summaries.get(t.base_key), blobs.get(t.base_key)) if t.base_key else None
                inflight[be.submit(_payload(plan, t, ref, base))] = (k, ref, 0)
                for dk in (t.ref_key, t.base_key):
                    if dk is not None:
                        release(dk)
            if not inflight:
                continue
            for h in sorted(be.wait(list(inflight)), key=lambda h: order[inflight[h][0]]):
                k, ref, tries = inflight.pop(h)
                res = be.result(h)
                if res.pop("died", False) and tries < 1:
                    # A co-runner may have killed the worker: run it once more before recording.
                    t = by_key[k]
                    base = _baseline(summaries.get(t.base_key), store.detail(t.base_key)) if t.base_key else None
                    inflight[be.submit(_payload(plan, t, ref, base))] = (k, ref, tries + 1)
                    continue
                finish(k, ref, res)
        for t in todo:  # defensive: every dependency is itself a task of the plan, so none is left
            if t.key not in finished:
                finish(t.key, None, {"status": "error", "error": "skipped: a run it depends on never ran"})
        cancelled = False
    finally:
        bar.close()
        be.close(cancel=cancelled)
    return outcome
