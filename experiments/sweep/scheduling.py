"""Executing a plan: its runs scheduled onto a backend, every result stored as it arrives.

A run needs its reference run (if any) to have succeeded, and the no_sync run of its (regime,
seed) to have finished (ok: its per-request latencies come along for the common-random-numbers
comparison; failed: the run goes ahead without them). Runs go one (regime, seed) after
another, and within one, dependencies first (the baseline, then references), everything else in
plan order; a matched control's draws are submitted as soon as its reference is stored, with that
run's merge and inner-step counts. (A worker keeps the no_sync run's tapes of the last few
(regime, seed) pairs it ran, which the other runs of that pair replay: experiments.runner.) At most 2 x workers runs
are in flight, so a sweep of any size keeps a bounded queue, and a baseline's latencies are
dropped once no pending run needs them. A run whose worker process died is run once more before
it is recorded as failed (a co-runner may have killed the worker). Runs stored by an earlier
session are skipped (--resume); the store's primary key makes a duplicate impossible.
"""

from __future__ import annotations

import heapq
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wadiloco.experiments.output import prepare_dir
from wadiloco.experiments.store import STORE_NAME, Store
from wadiloco.experiments.sweep.backends import make_backend
from wadiloco.experiments.sweep.folder import (
    LOCK_NAME,
    acquire_lock,
    check_out_folder,
    open_store_for,
    remove_empty_store,
    remove_stale_temps,
)
from wadiloco.experiments.sweep.kill_points import kill_after_commit, kill_point
from wadiloco.experiments.sweep.plan import Plan, Task
from wadiloco.models.results.metrics import ARRIVALS_HASH, INNER_STEPS, MERGES


@dataclass
class Outcome:
    total: int
    skipped: int
    ran: int
    ok: int
    errors: int
    backend: str
    workers: int


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
    """Run every run of the plan not yet stored in `out` (its lock held throughout). A session that
    fails before storing a run removes what it created (the folder, the store, the lock file)."""
    check_out_folder(Path(out))  # before anything is created in it
    out_existed = Path(out).exists()
    out = prepare_dir(out)
    made_lock = not (out / LOCK_NAME).exists()
    lock = acquire_lock(out)
    fresh = not (out / STORE_NAME).exists()
    ok, store = False, None
    try:
        remove_stale_temps(out)  # temp files of outputs a killed sweep or report was writing
        store = open_store_for(plan, out, resume)
        kill_point("plan-stored")
        oc = _run(plan, store, workers or os.cpu_count() or 1, backend, scheduler, progress)
        ok = True
        return oc
    finally:
        try:
            empty = store is None or not store.counts()
        finally:
            if store is not None:
                store.close()
            if not ok and fresh and empty:
                remove_empty_store(out, remove_dir=not out_existed)
            elif not ok and made_lock and store is None:
                (out / LOCK_NAME).unlink(missing_ok=True)
            os.close(lock)


def _run(plan: Plan, store: Store, workers: int, backend: str, scheduler: str | None, progress: bool) -> Outcome:
    tasks = plan.tasks()
    status = store.status()
    todo = [t for t in tasks if status.get(t.key) != "ok"]
    outcome = Outcome(len(tasks), len(tasks) - len(todo), 0, 0, 0, backend, workers)
    if not todo:
        return outcome
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
    try:
        be = make_backend(backend, workers, scheduler, plan.plugins)
        try:
            Scheduler(plan, store, be, outcome, bar).run(tasks, todo)
        except BaseException:
            be.close(cancel=True)
            raise
        be.close()
    finally:
        bar.close()
    return outcome


class Scheduler:
    """One session's pending runs: their dependencies, the runs in flight, and the recording."""

    def __init__(self, plan: Plan, store: Store, backend, outcome: Outcome, bar):
        self.plan, self.store, self.be, self.outcome, self.bar = plan, store, backend, outcome, bar
        self.by_key: dict[tuple, Task] = {}
        self.order: dict[tuple, int] = {}
        self.summaries: dict[tuple, dict | None] = {}  # finished dependency -> its summary (None: failed)
        self.blobs: dict[tuple, bytes | None] = {}  # finished baseline -> its packed latencies
        self.blockers: dict[tuple, set] = {}  # pending run -> dependencies it still waits for
        self.dependents: dict[tuple, list[tuple]] = defaultdict(list)  # dependency -> runs waiting for it
        self.users: dict[tuple, int] = defaultdict(int)  # dependency -> pending runs that need its data
        self.inflight: dict[Any, tuple[tuple, dict | None, int]] = {}  # handle -> (key, reference, tries)
        self.finished: set[tuple] = set()
        self.ready: list[tuple[tuple, tuple]] = []  # heap of (priority, key): see _ready
        self.rank: dict[tuple, int] = {}  # 0 a baseline, 1 a reference, 2 anything else
        self.group: dict[tuple, int] = {}  # (regime, seed) -> its place in the plan

    def run(self, tasks: list[Task], todo: list[Task]) -> None:
        self.by_key = {t.key: t for t in tasks}
        self.order = {t.key: i for i, t in enumerate(tasks)}
        for t in tasks:
            self.group.setdefault((t.regime, t.seed), len(self.group))
        self._index(todo)
        window = 2 * self.be.workers
        while self.ready or self.inflight:
            while self.ready and len(self.inflight) < window:
                self._submit(self.by_key[heapq.heappop(self.ready)[1]])
            if self.inflight:
                self._collect()
        for t in todo:  # defensive: every dependency is itself a task of the plan, so none is left
            if t.key not in self.finished:
                self._finish(t.key, None, {"status": "error", "error": "skipped: a run it depends on never ran"})

    def _index(self, todo: list[Task]) -> None:
        """Who waits for whom; dependencies stored by an earlier session are read from the store."""
        pending = {t.key for t in todo}
        for t in todo:
            deps = {k for k in (t.ref_key, t.base_key) if k is not None}
            for k in deps:
                self.users[k] += 1
                if k in pending:
                    self.dependents[k].append(t.key)
                elif k not in self.summaries:
                    self.summaries[k] = self.store.summary(k)
                    if k == t.base_key:
                        self.blobs[k] = self.store.detail(k)
            self.blockers[t.key] = deps & pending
        self.rank = {k: (0 if self.by_key[k].base_key is None else 1) for k in self.dependents}
        for t in todo:
            if not self.blockers[t.key]:
                self._ready(t.key)

    def _ready(self, k: tuple) -> None:
        """Queue a run whose dependencies are done: the earliest (regime, seed) first, so the runs of
        one pair follow each other (each worker's tapes of it are used before they are dropped); in
        it baselines, then references, then the rest, in plan order."""
        t = self.by_key[k]
        heapq.heappush(self.ready, ((self.group[(t.regime, t.seed)], self.rank.get(k, 2), self.order[k]), k))

    def _submit(self, t: Task) -> None:
        if t.ref_key is not None and self.summaries.get(t.ref_key) is None:
            self._skip(t, "has no result")
            return
        ref = _ref_counts(self.summaries[t.ref_key]) if t.ref_key is not None else None
        self._send(t, ref, self.blobs.get(t.base_key), 0)
        self._release(t)

    def _send(self, t: Task, ref: dict | None, blob: bytes | None, tries: int) -> None:
        base = _baseline(self.summaries.get(t.base_key), blob) if t.base_key else None
        self.inflight[self.be.submit(_payload(self.plan, t, ref, base))] = (t.key, ref, tries)

    def _collect(self) -> None:
        done = self.be.wait(list(self.inflight))
        for h in sorted(done, key=lambda h: self.order[self.inflight[h][0]]):
            key, ref, tries = self.inflight.pop(h)
            res = self.be.result(h)
            if res.pop("died", False) and tries < 1:
                t = self.by_key[key]  # run it once more; its baseline's latencies may be released: read them
                self._send(t, ref, self.store.detail(t.base_key) if t.base_key else None, tries + 1)
                continue
            self._finish(key, ref, res)

    def _finish(self, key: tuple, ref: dict | None, res: dict[str, Any]) -> None:
        """Store one run (its own transaction), count it, and release the runs waiting for it."""
        self.finished.add(key)
        t = self.by_key[key]
        arm = self.plan.arm(t.arm)
        self.store.record(key, t.regime, arm.name, arm.params, res, ref)
        kill_after_commit(self.store)
        ok = res.get("status") == "ok"
        self.outcome.ran += 1
        self.outcome.ok += ok
        self.outcome.errors += not ok
        if not ok:
            self.bar.set_postfix(failed=self.outcome.errors, refresh=False)
        self.bar.update(1)
        if key in self.dependents:
            self._release_dependents(t, res if ok else None)

    def _release_dependents(self, t: Task, res: dict[str, Any] | None) -> None:
        self.summaries[t.key] = res.get("summary") if res else None
        if t.base_key is None:
            self.blobs[t.key] = res.get("detail") if res else None
        for dk in self.dependents.pop(t.key):
            if dk in self.finished:  # already skipped (its reference failed)
                continue
            d = self.by_key[dk]
            self.blockers[dk].discard(t.key)
            if d.ref_key == t.key and res is None:
                self._skip(d, "failed")
            elif not self.blockers[dk]:
                self._ready(dk)

    def _skip(self, t: Task, why: str) -> None:
        self._release(t)
        ref = self.plan.arm(t.arm).reference
        self._finish(
            t.key, None, {"status": "error", "error": f"skipped: its reference run ({ref}, seed {t.seed}) {why}"}
        )

    def _release(self, t: Task) -> None:
        """A pending run no longer needs its dependencies' data; drop what nobody else needs."""
        for k in (t.ref_key, t.base_key):
            if k is not None:
                self.users[k] -= 1
                if self.users[k] <= 0:
                    self.blobs.pop(k, None)


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
    return {"merges": int(summary[MERGES]), "steps": int(summary[INNER_STEPS])}


def _baseline(summary: dict[str, Any] | None, blob: bytes | None) -> dict[str, Any] | None:
    if not summary or blob is None:
        return None
    return {"e2e": blob, "arrivals_hash": summary.get(ARRIVALS_HASH)}
