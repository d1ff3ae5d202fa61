"""A sweep's output folder: its lock, its results store, and what a killed session left behind.

A sweep writes only into a folder that is new, empty, or holds this tool's store (checked before
anything is created there): a folder of a user's own files is refused, not overwritten. One sweep
at a time writes a folder (an flock on `.wadiloco-sweep.lock`). The store is opened for the plan
it was created for, or refused: another sweep's results are never mixed in, and a folder holding
this sweep's results needs --resume. Temp files of atomic writes a kill interrupted (they carry
this tool's marker, experiments.output.TEMP_MARK) are removed at the start of the next session;
finished files and other people's files are never touched. The store keeps the sweep's provenance
(`record_provenance`): made with the store, one session appended by each --resume.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from wadiloco.experiments.output import TEMP_MARK
from wadiloco.experiments.store import STORE_NAME, Store
from wadiloco.experiments.sweep.kill_points import kill_point
from wadiloco.experiments.sweep.plan import Plan
from wadiloco.models.errors import InputError
from wadiloco.models.spec.schema import not_regular

LOCK_NAME = ".wadiloco-sweep.lock"
PROVENANCE_KEY = "provenance"  # the store's meta entry; `report` writes it out as provenance.json
# The files a sweep's report and export write atomically (temp file + os.replace).
OUTPUTS = (
    "runs.csv",
    "summary.csv",
    "comparisons.csv",
    "load_check.csv",
    "report.md",
    "report.html",
    "provenance.json",
    "export.csv",
    "export.parquet",
)
# write_atomic's temp files: .<name>.wadiloco-tmp.<8 random chars>
_TEMP = re.compile(rf"^\.(?P<name>.+)\.{TEMP_MARK}\.[a-z0-9_]{{8}}$")
STORE_FILES = (STORE_NAME, STORE_NAME + "-wal", STORE_NAME + "-shm", STORE_NAME + "-journal")


def check_out_folder(out: Path) -> None:
    """Refuse, before anything is created, an --out that is not a folder, or a folder holding
    files but no store of this tool: a sweep does not write over a user's own runs.csv."""
    if not out.exists():
        if out.is_symlink():
            raise InputError(out, "--out", f"is a symlink to a missing folder ({os.readlink(out)})")
        return
    if not out.is_dir():
        why = not_regular(out.stat().st_mode) or "is a file"
        raise InputError(out, "--out", f"cannot create output folder: the path exists and {why}")
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError as e:
        raise InputError(out, "--out", f"cannot read the output folder: {e.strerror or e}") from None
    if STORE_NAME in names:
        return  # whose sweep it is, the store says (open_store_for)
    foreign = [n for n in names if n != LOCK_NAME and n not in STORE_FILES and not _TEMP.match(n)]
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise InputError(
            out,
            "--out",
            f"is not empty ({shown}) and holds no results store of this tool ({STORE_NAME}); "
            "a sweep writes only into a new or empty folder, or one holding the same sweep (nothing was written)",
        )


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
    path = out / STORE_NAME
    if path.is_file() and path.stat().st_size == 0 and not _has_content(out / (STORE_NAME + "-wal")):
        sys.stderr.write(f"note: {path} was an empty file (0 bytes); starting a new results store in it\n")
    elif path.is_file():
        _refuse_other(plan, out, resume)  # read-only first: a refused store is left byte for byte as it was
    store = Store(path)
    kill_point("store-opened")
    ident = store.identity()
    if ident is None:
        store.set_plan(plan.identity(), plan.to_dict())
    else:
        try:
            _check_identity(store, plan, out, resume)
        finally:
            if ident != plan.identity() or not resume:
                store.close()
        store.set_plan(ident, plan.to_dict())  # analysis settings (bootstrap, gate) may have changed
    record_provenance(store, plan, resume=ident is not None)
    return store


def record_provenance(store: Store, plan: Plan, resume: bool) -> None:
    """The sweep's provenance in its store (experiments.provenance.of_sweep), made when the store
    is; each session appends the software that ran it, so one resumed under another version or
    revision says so. A store made before provenance was kept gets it on its first resume, noted."""
    from wadiloco.experiments import provenance

    old = store.provenance()
    rec = old if old is not None else provenance.of_sweep(plan)
    if old is None and resume:
        rec["note"] = "recorded on a resume: the sessions before it ran without a provenance record"
    rec.setdefault("sessions", []).append(provenance.session(resume, store.counts().get("ok", 0)))
    store.set_meta(PROVENANCE_KEY, json.dumps(rec, sort_keys=True, separators=(",", ":")))


def _refuse_other(plan: Plan, out: Path, resume: bool) -> None:
    """The store's identity checks, through a read-only connection; a store that cannot be read so
    (a journal to replay, another program's file) is left to the writer's own checks."""
    try:
        ro = Store(out / STORE_NAME, readonly=True)
    except InputError:
        return
    try:
        ident = ro.identity()
    except InputError:
        ro.close()
        return
    try:
        if ident is not None:
            _check_identity(ro, plan, out, resume)
            ro.provenance()
            for _ in ro.rows():  # every stored run read as the report will read it: damage found before any write
                pass
            ro.check_details()
    finally:
        ro.close()


def _check_identity(store: Store, plan: Plan, out: Path, resume: bool) -> None:
    if store.identity() != plan.identity():
        old = store.plan()
        was, now = dict(old.get("inputs") or {}), plan.inputs
        edited = sorted(f for f in set(was) | set(now) if was.get(f) != now.get(f))
        why = (
            f"the contents of {', '.join(edited[:3])} changed since"
            if edited
            else "other regimes, policies, params or seeds"
        )
        raise InputError(
            out,
            "--out",
            f"already holds the results of a different sweep ({old.get('name')!r} from "
            f"{old.get('file')}; {why}); choose another output folder or remove this one",
        )
    if not resume:
        c = store.counts()
        raise InputError(
            out,
            "--resume",
            f"already holds this sweep's results ({c.get('ok', 0)} completed, "
            f"{c.get('error', 0)} failed runs); pass --resume to continue it",
        )


def _has_content(p: Path) -> bool:
    try:
        return p.stat().st_size > 0
    except OSError:
        return False


def remove_empty_store(out: Path, remove_dir: bool) -> None:
    """A sweep that failed before recording any run (e.g. no Dask scheduler) leaves nothing behind."""
    for name in (*STORE_FILES, LOCK_NAME):
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
    """Delete the temp files of writes a kill interrupted (.runs.csv.wadiloco-tmp.k3j9x0qa,
    figures/.x.png.wadiloco-tmp.a8d7f6s5).
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
