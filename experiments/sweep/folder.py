"""A sweep's output folder: its lock, its results store, and what a killed session left behind.

One sweep at a time writes a folder (an flock on `.wadiloco-sweep.lock`). The store is opened
for the plan it was created for, or refused: another sweep's results are never mixed in, and a
folder holding this sweep's results needs --resume. Temp files of atomic writes a kill
interrupted are removed at the start of the next session; finished files are never touched.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from wadiloco.experiments.store import STORE_NAME, Store
from wadiloco.experiments.sweep.kill_points import kill_point
from wadiloco.experiments.sweep.plan import Plan
from wadiloco.models.errors import InputError

LOCK_NAME = ".wadiloco-sweep.lock"
# The files a sweep's report and export write atomically (temp file + os.replace).
OUTPUTS = (
    "runs.csv",
    "summary.csv",
    "comparisons.csv",
    "load_check.csv",
    "report.md",
    "report.html",
    "export.csv",
    "export.parquet",
)
_TEMP = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}$")  # write_atomic's temp files: .<name>.<8 random chars>


def acquire_lock(out: Path) -> int:
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
    kill_point("store-opened")
    ident = store.identity()
    if ident is None:
        store.set_plan(plan.identity(), plan.to_dict())
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
        store.set_plan(ident, plan.to_dict())  # analysis settings (bootstrap, gate) may have changed
    return store


def remove_empty_store(out: Path, remove_dir: bool) -> None:
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


def remove_stale_temps(out: Path) -> list[str]:
    """Delete the temp files of writes a kill interrupted (.runs.csv.k3j9x0qa, figures/.x.png.a8d7f6s5).
    Called by a sweep holding the folder's lock; the finished files themselves are never touched."""
    removed = []
    for d, ok in ((out, lambda n: n in OUTPUTS), (out / "figures", lambda n: n.endswith(".png"))):
        try:
            names = [p.name for p in d.iterdir()]
        except OSError:
            continue
        for name in names:
            m = _TEMP.match(name)
            if m and ok(m.group("name")):
                try:
                    (d / name).unlink()
                    removed.append(name)
                except OSError:
                    pass
    return removed
