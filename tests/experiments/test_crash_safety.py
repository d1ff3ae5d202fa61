"""Crash safety of sweeps: SIGKILL, SIGTERM and SIGHUP at recorded points and --resume, a read-only
output folder, a full disk.

- One sweep is SIGKILLed at recorded points ($WADILOCO_TEST_KILL_AT, see
  experiments/sweep/kill_points.py): right after the store is created, right after the plan is
  recorded, right after the store holds k1 and then k2 rows (k1, k2 drawn with a fixed seed), and
  right after the report wrote runs.csv, and resumed with `--resume` after each kill. Only the main
  process dies, as under the OOM killer, and its workers must exit on their own. After each kill
  the store holds exactly what was committed up to that point; the final CSVs are byte-identical
  to an uninterrupted sweep's, the store holds every run exactly once (attempts = 1), and no run
  stored before a kill is lost or changed by a later session. Temp files of interrupted writes
  are cleared by the resume.
- A read-only output folder (really read-only: as root, the check runs with an unprivileged
  effective uid, since root ignores permission bits), an output path that is a file, and a
  figures folder that cannot be made give exit code 2 and a one-paragraph message and change
  nothing; an archived (read-only) sweep can still be exported.
- A full disk -- SQLite's own "database or disk is full" (a page limit on the store's
  connection) and ENOSPC while a report file is written -- gives exit code 2 and a clear
  message, and leaves the store intact and readable.

An exception inside one run being recorded while the sweep goes on is covered by
tests/experiments/test_sweep.py::test_failing_run_is_recorded_and_retried_on_resume (and resumed there).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import errno
import os
import random
import shutil
import signal
import sqlite3
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from sweep_helpers import (  # noqa: F401
    group_members,
    plugins_env,
    run_until_killed,
    spawn_sweep,
    tiny_sweep_dict,
    write_sweep,
)

# imported up front: the read-only tests drop privileges, and may not import anything after that
import wadiloco.experiments.commands  # noqa: F401
import wadiloco.experiments.planning_cli  # noqa: F401
import wadiloco.experiments.report  # noqa: F401
import wadiloco.experiments.sweep.backends as backends
import wadiloco.experiments.sweep.cli  # noqa: F401
from wadiloco.experiments.cli import main
from wadiloco.experiments.store import Store

KILL_SEED = 20250607  # the kill points are drawn from this
SEEDS = 2  # 2 regimes x 2 seeds x 8 runs per seed = 32 runs
KEY = "scenario_hash, policy_label, params_hash, seed, draw"


@contextlib.contextmanager
def _inspect(out: Path):
    """A connection to a copy of the store and its side files: what the next opener sees after
    SQLite's own recovery (a read-only connection cannot roll back a hot journal a kill left)."""
    with tempfile.TemporaryDirectory() as d:
        for f in out.glob("runs.sqlite*"):
            shutil.copy(f, Path(d) / f.name)
        con = sqlite3.connect(Path(d) / "runs.sqlite")
        try:
            yield con
        finally:
            con.close()


def _rows(out: Path) -> dict[tuple, tuple]:
    """Every stored run: key -> (status, attempts, summary_json), read straight from SQLite."""
    with _inspect(out) as con:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone():
            return {}  # killed between creating the file and creating its tables
        return {
            tuple(r[:5]): tuple(r[5:]) for r in con.execute(f"SELECT {KEY}, status, attempts, summary_json FROM runs")
        }


def _integrity(out: Path) -> str:
    with _inspect(out) as con:
        return con.execute("PRAGMA integrity_check").fetchone()[0]


def _leftovers(out: Path) -> list[str]:
    """Hidden files anywhere in the folder but the lock (write_atomic's temp files are
    .<name>.wadiloco-tmp.<8 chars>)."""
    return sorted(p.name for p in out.rglob(".*") if p.is_file() and not p.name.startswith(".wadiloco"))


class InlineBackend:
    """Runs each task in this process when it is submitted: no worker start-up, same results
    (tests/experiments/test_determinism_sweep.py shows results do not depend on the processes that compute them)."""

    name = "local"

    def __init__(self, workers, plugins=()):
        self.workers = 1

    def submit(self, task):
        f = cf.Future()
        f.set_result(backends.execute_task(task))
        return f

    def wait(self, handles):
        return list(handles)

    def result(self, h):
        return h.result()

    def close(self, cancel=False):
        pass


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """The uninterrupted reference sweep, through the CLI, its runs computed in this process."""
    root = tmp_path_factory.mktemp("crash")
    d = tiny_sweep_dict()
    d["seeds"] = SEEDS
    sweep = write_sweep(root / "tiny.yaml", d)
    out = root / "ref"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backends, "LocalBackend", InlineBackend)
        assert main(["sweep", str(sweep), "--out", str(out), "--no-progress", "--no-figures"]) == 0
    rows = _rows(out)
    return {"sweep": sweep, "out": out, "total": len(rows), "rows": rows}


# ---- SIGKILL at recorded points and --resume ------------------------------------------------


def _check_store(out: Path, before: dict[tuple, tuple], n: int, ref_rows: dict) -> dict[tuple, tuple]:
    """After a kill: the store is sound and holds exactly `n` runs, every run stored before is still
    there unchanged, and every stored run is a run of the plan, stored once, with the uninterrupted
    sweep's result."""
    assert _integrity(out) == "ok"
    rows = _rows(out)
    assert len(rows) == n, f"{len(rows)} runs stored, expected {n}"
    lost = [k for k, v in before.items() if rows.get(k) != v]
    assert not lost, f"runs lost or changed after a kill: {lost[:3]}"
    for k, (status, attempts, summary) in rows.items():
        assert k in ref_rows, f"a run that is not in the plan: {k}"
        assert status == "ok" and attempts == 1, (k, status, attempts)
        assert summary == ref_rows[k][2], f"run {k} differs from the uninterrupted sweep"
    return rows


def test_sigkill_at_recorded_points_then_resume(ref, tmp_path):
    sweep, total = ref["sweep"], ref["total"]
    rng = random.Random(KILL_SEED)
    k1 = rng.randint(3, total // 3)
    k2 = rng.randint(total // 2, total - 4)
    print(f"kill points: store-opened, plan-stored, rows={k1} (2 workers), rows={k2} (1 worker), wrote:runs.csv")
    out = tmp_path / "out"

    # 1. start-up: the store and its tables exist, no plan recorded; then the plan is, no run yet
    run_until_killed(sweep, out, "store-opened", "--workers", "2")
    rows = _check_store(out, {}, 0, ref["rows"])
    run_until_killed(sweep, out, "plan-stored", "--workers", "2", "--resume")
    rows = _check_store(out, rows, 0, ref["rows"])

    # 2. and 3. right after k1, then k2 runs are stored (on 2, then 1 worker), runs still in flight
    for k, workers in ((k1, "2"), (k2, "1")):
        run_until_killed(sweep, out, f"rows={k}", "--workers", workers, "--resume")
        rows = _check_store(out, rows, k, ref["rows"])

    # 4. while the report is being written: every run is stored, runs.csv is, report.md is not yet
    run_until_killed(sweep, out, "wrote:runs.csv", "--workers", "2", "--resume")
    rows = _check_store(out, rows, total, ref["rows"])
    assert (out / "runs.csv").read_bytes() == (ref["out"] / "runs.csv").read_bytes()
    assert not (out / "summary.csv").exists() and not (out / "report.md").exists()
    # a kill in the middle of a write leaves only a hidden temp file (never a truncated output),
    # marked as this tool's; plant some to check that --resume clears them away, and a user's
    # files that merely look like temp files, which it must leave alone
    (out / ".summary.csv.wadiloco-tmp.k3j9x0qa").write_text("regime,poli")
    (out / "figures").mkdir(exist_ok=True)
    (out / "figures" / ".envelope.png.wadiloco-tmp.a8d7f6s5").write_bytes(b"\x89PN")
    (out / "notes.txt").write_text("mine")  # a user's own file is left alone
    (out / ".runs.csv.backup01").write_text("mine too")
    (out / "figures" / ".envelope.png.a8d7f6s5").write_text("and mine")

    # 5. the last --resume runs nothing and writes the outputs
    assert main(["sweep", str(sweep), "--out", str(out), "--resume", "--no-progress", "--no-figures"]) == 0
    final = _check_store(out, rows, total, ref["rows"])
    assert set(final) == set(ref["rows"]), "lost or extra runs"
    for f in ("runs.csv", "summary.csv", "comparisons.csv", "load_check.csv"):
        assert (out / f).read_bytes() == (ref["out"] / f).read_bytes(), f
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == total and not runs.duplicated(["regime", "policy", "seed", "draw"]).any()
    assert (out / "report.md").exists() and (out / "notes.txt").read_text() == "mine"
    assert (out / ".runs.csv.backup01").read_text() == "mine too"
    assert (out / "figures" / ".envelope.png.a8d7f6s5").read_text() == "and mine"
    assert [n for n in _leftovers(out) if "wadiloco-tmp" in n] == []


# ---- SIGTERM and SIGHUP at recorded points, handled like Ctrl-C ----------------------------


# SIGHUP takes the same path as SIGTERM (experiments/cli.py); its sweep run is in the slow set, and
# a SIGHUP during `run` is in the default suite (tests/spec/test_reliability.py)
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow)], ids=["SIGTERM", "SIGHUP"]
)
def test_sigterm_and_sighup_at_a_recorded_point_then_resume(ref, tmp_path, sig):
    """A service manager's SIGTERM or a closed terminal's SIGHUP, sent at a recorded point (the
    store holds k rows): the sweep stops its workers, says what is saved and how to go on, and
    exits 128 + the signal's number, with no traceback and no leaked-semaphore warning; no worker
    outlives it; the store holds exactly the committed runs; --resume then gives byte-identical
    CSVs."""
    k = random.Random(KILL_SEED + sig).randint(3, ref["total"] - 4)
    out = tmp_path / "out"
    env = {"WADILOCO_TEST_KILL_AT": f"rows={k}", "WADILOCO_TEST_KILL_SIGNAL": sig.name[3:]}
    proc = spawn_sweep(ref["sweep"], out, env, "--workers", "2")
    try:
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers: a process group we started
        proc.wait()
        pytest.fail(f"the sweep never reached its stop point rows={k}")
    err = err.decode()
    assert proc.returncode == 128 + sig, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "leaked" not in err and "resource_tracker" not in err, err
    assert f"stopped by {sig.name}" in err and "--resume" in err and "runs.sqlite" in err, err
    t0 = time.monotonic()
    while group_members(proc.pid):
        assert time.monotonic() - t0 < 60, "worker processes outlived the stopped sweep"
        time.sleep(0.05)
    rows = _check_store(out, {}, k, ref["rows"])
    assert f"{k} completed run(s) are saved" in err, err
    assert main(["sweep", str(ref["sweep"]), "--out", str(out), "--resume", "--no-progress", "--no-figures"]) == 0
    final = _check_store(out, rows, ref["total"], ref["rows"])
    assert set(final) == set(ref["rows"])
    for f in ("runs.csv", "summary.csv", "comparisons.csv", "load_check.csv"):
        assert (out / f).read_bytes() == (ref["out"] / f).read_bytes(), f


# ---- read-only output folder ----------------------------------------------------------------


@contextlib.contextmanager
def read_only(path: Path):
    """Make `path` read-only for this process. Root ignores permission bits, so as root the block
    also runs with the effective uid/gid of `nobody` (the kernel then refuses writes for real)."""
    mode = path.stat().st_mode
    path.chmod(stat.S_IMODE(mode) & ~0o222)
    dropped = False
    try:
        if os.geteuid() == 0:
            try:
                os.setegid(65534)
                os.seteuid(65534)
                dropped = True
            except OSError:
                pytest.skip("running as root and cannot drop privileges for a read-only folder")
        yield
    finally:
        if dropped:
            os.seteuid(0)
            os.setegid(0)
        path.chmod(stat.S_IMODE(mode))


@pytest.fixture
def public_tmp():
    """A scratch folder everyone may read (pytest's tmp_path is private to root, so `nobody`
    could not even read the sweep file there)."""
    d = Path(tempfile.mkdtemp(prefix="wadiloco-ro-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _tree(p: Path) -> dict[str, bytes]:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def _one_paragraph(err: str, *names: str) -> None:
    assert "Traceback" not in err and err.startswith("error: "), err
    assert err.strip().count("\n") == 0, f"more than one paragraph: {err!r}"
    for n in names:
        assert n in err, (n, err)


def _public_sweep(d: Path) -> Path:
    """The reference sweep file with its scenarios copied next to it, all readable by anyone."""
    sw = tiny_sweep_dict()
    sw["seeds"] = SEEDS
    regimes = []
    for r in sw["regimes"]:
        regimes.append(str(Path(shutil.copy(r, d / Path(r).name))))
        Path(regimes[-1]).chmod(0o644)
    sw["regimes"] = regimes
    p = write_sweep(d / "tiny.yaml", sw)
    p.chmod(0o644)
    return p


def _archive(ref_out: Path, dest: Path) -> Path:
    """A copy of a finished sweep folder as an archive would hold it (no SQLite side files)."""
    shutil.copytree(ref_out, dest)
    for side in ("runs.sqlite-wal", "runs.sqlite-shm"):
        (dest / side).unlink(missing_ok=True)
    for f in [dest, *dest.rglob("*")]:
        f.chmod(0o755 if f.is_dir() else 0o644)
    return dest


def test_sweep_into_a_read_only_folder(ref, public_tmp, capsys):
    sweep = _public_sweep(public_tmp)
    out = public_tmp / "ro"
    out.mkdir()
    capsys.readouterr()
    with read_only(out):
        rc_new = main(["sweep", str(sweep), "--out", str(out), "--no-progress"])
        err_new = capsys.readouterr().err
        rc_sub = main(["sweep", str(sweep), "--out", str(out / "sub"), "--no-progress"])
        err_sub = capsys.readouterr().err
    assert rc_new == 2 and rc_sub == 2
    _one_paragraph(err_new, str(out), "not writable")
    _one_paragraph(err_sub, str(out / "sub"), "cannot create output folder")
    assert list(out.iterdir()) == []


def test_read_only_folder_holding_a_sweep(ref, public_tmp, capsys):
    """An archived sweep: --resume and `report` refuse cleanly and change nothing; `export` to
    somewhere writable still works (SQLite cannot create its WAL index next to the store there)."""
    sweep = _public_sweep(public_tmp)
    out = _archive(ref["out"], public_tmp / "archived")
    before = _tree(out)
    dest = public_tmp / "exports"
    dest.mkdir()
    dest.chmod(0o777)
    capsys.readouterr()
    with read_only(out):
        rc_resume = main(["sweep", str(sweep), "--out", str(out), "--resume", "--no-progress"])
        err_resume = capsys.readouterr().err
        rc_report = main(["report", str(out), "--no-figures"])
        err_report = capsys.readouterr().err
        rc_export = main(["export", str(out), "--output", str(dest / "runs.csv")])
        err_export = capsys.readouterr().err
    assert rc_resume == 2 and rc_report == 2, (err_resume, err_report)
    _one_paragraph(err_resume, str(out), "not writable")
    _one_paragraph(err_report, "runs.csv", "cannot write")
    assert rc_export == 0, err_export
    assert pd.read_csv(dest / "runs.csv").shape[0] == ref["total"]
    assert _tree(out) == before
    assert _integrity(out) == "ok"


def test_folder_name_with_uri_characters(ref, tmp_path):
    """'#', '?' and '%' in the folder's name: the store is opened read-only through a file: URI,
    which must not end the path early (and open, or create, some other file)."""
    out = tmp_path / "run #3?x=1 100%"
    shutil.copytree(ref["out"], out)
    assert main(["report", str(out), "--no-figures"]) == 0
    assert main(["export", str(out), "--output", str(tmp_path / "e.csv")]) == 0
    assert (out / "runs.csv").read_bytes() == (ref["out"] / "runs.csv").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "e.csv"])  # no stray file


def test_figures_folder_that_cannot_be_made(ref, tmp_path, capsys):
    out = tmp_path / "done"
    shutil.copytree(ref["out"], out)
    (out / "figures").write_text("in the way")
    rc = main(["report", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    _one_paragraph(err, str(out / "figures"), "cannot create the figures folder")


@pytest.mark.parametrize("how", ["out is a file", "out is below a file"])
def test_output_path_that_is_a_file(ref, tmp_path, capsys, how):
    f = tmp_path / "results"
    f.write_text("not a folder")
    out = f if how == "out is a file" else f / "sub"
    rc = main(["sweep", str(ref["sweep"]), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    _one_paragraph(err, str(out), "cannot create output folder")
    assert f.read_text() == "not a folder"


# ---- full disk --------------------------------------------------------------------------------


def test_full_disk_while_storing_runs(ref, tmp_path, monkeypatch, capsys):
    """SQLite's own SQLITE_FULL, from a page limit on the store's connection: the sweep stops with
    exit code 2 and a message, every run it stored is intact, and export still reads them."""
    monkeypatch.setattr(backends, "LocalBackend", InlineBackend)
    real_init = Store.__init__

    def small_disk(self, path, readonly=False):
        real_init(self, path, readonly)
        if not readonly:
            self.conn.execute("PRAGMA max_page_count = 40")  # 160 KiB: room for about half the runs

    monkeypatch.setattr(Store, "__init__", small_disk)
    out = tmp_path / "full"
    rc = main(["sweep", str(ref["sweep"]), "--out", str(out), "--no-progress", "--no-figures"])
    err = capsys.readouterr().err
    assert rc == 2
    _one_paragraph(err, "runs.sqlite", "full", "intact")
    monkeypatch.setattr(Store, "__init__", real_init)
    assert _integrity(out) == "ok"
    rows = _rows(out)
    assert 0 < len(rows) < ref["total"]
    for k, v in rows.items():
        assert v == ref["rows"][k], k  # stored runs are complete and correct
    assert main(["export", str(out), "--output", str(tmp_path / "e.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "e.csv")) == len(rows)
    assert _leftovers(out) == []


def test_full_disk_while_writing_the_report(ref, tmp_path, monkeypatch, capsys):
    """ENOSPC on the third output file: exit code 2 and a message naming it; every output file is
    either the old one or a complete new one, no temp file is left, the store is untouched."""
    out = tmp_path / "done"
    shutil.copytree(ref["out"], out)
    for f in ("runs.csv", "summary.csv", "comparisons.csv", "load_check.csv"):
        (out / f).write_text("old\n")
    store_before = _rows(out)
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    rc = main(["sweep", str(ref["sweep"]), "--out", str(out), "--resume", "--no-progress", "--no-figures"])
    err = capsys.readouterr().err
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert rc == 2
    _one_paragraph(err, "comparisons.csv", "No space left on device")
    for f in ("runs.csv", "summary.csv"):
        assert (out / f).read_bytes() == (ref["out"] / f).read_bytes(), f
    for f in ("comparisons.csv", "load_check.csv"):
        assert (out / f).read_text() == "old\n", f
    assert _leftovers(out) == []
    assert _integrity(out) == "ok" and _rows(out) == store_before
