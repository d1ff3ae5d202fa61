"""The results store: one SQLite file (`runs.sqlite`) in the sweep's output folder.

- One row per run, primary key (scenario_hash, policy_label, params_hash, seed, draw).
- Only the parent process writes. Each finished run is one INSERT ... ON CONFLICT DO UPDATE
  statement in autocommit mode, i.e. its own transaction; WAL journal with synchronous=NORMAL. A
  SIGKILL at any moment leaves every committed run intact (a commit is in the WAL file when the
  statement returns; the operating system keeps it) and rolls back at most the one in-flight
  statement, and the primary key makes a duplicate impossible. A commit does not wait for the disk
  (FULL's fsync per run took ~2 ms of the parent's ~3 ms per run): a power cut or an operating-system
  crash may roll back the last runs, never corrupt the store, and --resume runs those again; each
  session's end (`close`: a checkpoint, fsynced) makes all of its runs durable.
- `detail` keeps the no_sync runs' per-request end-to-end latencies (float32, zlib), which every
  other run on the same (regime, seed) is compared with (common random numbers).
- `status` is 'ok' or 'error' (with the error text). `--resume` skips 'ok' rows and retries the
  rest; `attempts` counts how often a key was written.
- `meta` holds the sweep's identity (its run set) and its JSON description, so `wadiloco report`
  and `wadiloco export` need nothing but the folder, and its provenance (`provenance`: resolved
  inputs, and the version and git revision of each session; experiments.provenance.of_sweep).
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from wadiloco.models.errors import InputError

STORE_NAME = "runs.sqlite"
SCHEMA_VERSION = "1"
PLAN_KEYS = ("name", "regimes", "arms", "seeds")  # what a stored plan holds at least (Plan.from_dict reads them)
DAMAGED = "the store is damaged (edited or corrupted outside this tool): run the sweep again into a new folder"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    scenario_hash TEXT NOT NULL,
    policy_label  TEXT NOT NULL,
    params_hash   TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    draw          INTEGER NOT NULL,
    regime        TEXT NOT NULL,
    policy        TEXT NOT NULL,
    params_json   TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    error         TEXT,
    summary_json  TEXT,
    timeline_json TEXT,
    reference_json TEXT,
    detail        BLOB,
    wall_s        REAL,
    attempts      INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (scenario_hash, policy_label, params_hash, seed, draw)
) WITHOUT ROWID;
"""

UPSERT = """
INSERT INTO runs (scenario_hash, policy_label, params_hash, seed, draw, regime, policy, params_json,
                  status, error, summary_json, timeline_json, reference_json, detail, wall_s)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (scenario_hash, policy_label, params_hash, seed, draw) DO UPDATE SET
    regime = excluded.regime, policy = excluded.policy, params_json = excluded.params_json,
    status = excluded.status, error = excluded.error, summary_json = excluded.summary_json,
    timeline_json = excluded.timeline_json, reference_json = excluded.reference_json,
    detail = excluded.detail, wall_s = excluded.wall_s, attempts = runs.attempts + 1
"""


def _compact(obj: Any) -> str | None:
    if obj is None:
        return None
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


class Store:
    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        try:
            if readonly:
                if not self.path.exists():
                    raise InputError(
                        self.path.parent,
                        "",
                        f"no results store ({STORE_NAME}) here; run `wadiloco sweep SWEEP.yaml "
                        f"--out {self.path.parent}` first",
                    )
                self.conn = self._connect_readonly()
            else:
                self.conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=30)
                self._refuse_foreign()
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")  # module docstring
                self.conn.executescript(SCHEMA)
            self.conn.execute("PRAGMA busy_timeout=30000")
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as e:
            what = "not a readable results store" if readonly else "cannot open or create the results store"
            raise InputError(self.path, "", f"{what} ({e})") from None
        try:
            self._check_version()
        except InputError:
            self.conn.close()
            raise

    def _check_version(self) -> None:
        """A store of another format is refused, never read as this one (none yet: a new store)."""
        v = self.meta("schema_version")
        if v is not None and v != SCHEMA_VERSION:
            shown = repr(v) if len(v) <= 12 else f"of {len(v)} characters"
            raise InputError(
                self.path,
                "meta.schema_version",
                f"a results store of format {shown}, and this version reads format {SCHEMA_VERSION} only: read it "
                "with the version that wrote it, or run the sweep again into a new folder",
            )

    def _uri(self, query: str) -> str:
        # percent-encode the path: a '?', '#' or '%' in a folder name would otherwise end the path
        # early (and open, or even create, a different file)
        return f"file:{quote(str(self.path.absolute()))}?{query}"

    def _connect_readonly(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._uri("mode=ro"), uri=True, isolation_level=None, timeout=30)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            conn.close()
            for side in ("-wal", "-journal"):
                f = self.path.with_name(self.path.name + side)
                if f.exists() and f.stat().st_size > 0:
                    raise  # a journal to replay or roll back first: only a writer (--resume) can
        # A store in a read-only folder (an archived sweep): SQLite cannot create the WAL index
        # next to it, but with no journal pending the file alone is complete, so read it as is.
        return sqlite3.connect(self._uri("immutable=1"), uri=True, isolation_level=None)

    def _refuse_foreign(self) -> None:
        """Another program's SQLite file named runs.sqlite is left exactly as it is."""
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables - {"meta", "runs"}:
            self.conn.close()
            raise InputError(
                self.path,
                "",
                f"is an SQLite database of another program (tables: {', '.join(sorted(tables)[:5])}); "
                "it was not touched: give the sweep another --out",
            )

    def close(self) -> None:
        """A writer folds its write-ahead log into the store first and leaves it in rollback-journal
        mode, so that a finished or stopped sweep's results live in runs.sqlite alone, and a
        read-only reader (report, export) creates no -wal file beside it. After a SIGKILL the
        results may also be in runs.sqlite-wal: the store is the pair of files until the next
        session opens it."""
        if not self.readonly:
            try:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self.conn.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.Error:
                pass  # a busy or full disk, another reader: the WAL stays, and is replayed on the next open
        self.conn.close()

    def _fail(self, e: sqlite3.Error, what: str):
        raise InputError(
            self.path, "", f"cannot {what} the results store: {e}; completed runs already stored are intact"
        ) from None

    # ---- meta ------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as e:
            raise InputError(self.path, "", f"not a results store of this tool ({e})") from None
        return row[0] if row else None

    def identity(self) -> str | None:
        return self.meta("identity")

    def plan(self) -> dict[str, Any]:
        """The sweep's description (experiments.sweep.plan.Plan.to_dict), checked to be one."""
        raw = self.meta("plan")
        if raw is None:
            raise InputError(
                self.path,
                "meta.plan",
                "the store has no sweep description (was the sweep killed before it started?); run the sweep again",
            )
        plan = self._json(raw, "meta.plan", "the sweep description")
        missing = [k for k in PLAN_KEYS if not isinstance(plan, dict) or k not in plan]
        if missing:
            raise InputError(self.path, "meta.plan", f"the sweep description lacks {', '.join(missing)}; {DAMAGED}")
        return plan

    def provenance(self) -> dict[str, Any] | None:
        """The sweep's provenance record (None: a store made before one was kept), checked to be a mapping."""
        raw = self.meta("provenance")
        rec = None if raw is None else self._json(raw, "meta.provenance", "the provenance record")
        if rec is not None and not isinstance(rec, dict):
            raise InputError(self.path, "meta.provenance", f"the provenance record is not a mapping; {DAMAGED}")
        return rec

    def _json(self, raw: object, where: str, what: str) -> Any:
        if not isinstance(raw, str):
            raise InputError(self.path, where, f"{what} is not JSON text; {DAMAGED}")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise InputError(self.path, where, f"{what} is not valid JSON; {DAMAGED}") from None

    def set_plan(self, identity: str, plan: dict[str, Any]) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            for k, v in (("schema_version", SCHEMA_VERSION), ("plan", _compact(plan)), ("identity", identity)):
                self.conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (k, v),
                )
            self.conn.execute("COMMIT")
        except sqlite3.Error as e:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self._fail(e, "write to")

    def set_meta(self, key: str, value: str) -> None:
        """One more meta entry (the sweep's provenance), in its own transaction."""
        try:
            self.conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        except sqlite3.Error as e:
            self._fail(e, "write to")

    # ---- runs ------------------------------------------------------------------------------
    def record(
        self, key: tuple, regime: str, policy: str, params: dict, result: dict[str, Any], reference: dict | None = None
    ) -> None:
        """Commit one finished run (its own transaction)."""
        ok = result.get("status") == "ok"
        row = (
            *key,
            regime,
            policy,
            _compact(params),
            "ok" if ok else "error",
            None if ok else str(result.get("error", "unknown error"))[:20000],
            _compact(result.get("summary")) if ok else None,
            _compact(result.get("timeline")) if ok else None,
            _compact(reference),
            result.get("detail") if ok else None,
            result.get("wall_s"),
        )
        try:
            self.conn.execute(UPSERT, row)
        except sqlite3.Error as e:
            self._fail(e, "write to")

    def status(self) -> dict[tuple, str]:
        try:
            cur = self.conn.execute("SELECT scenario_hash, policy_label, params_hash, seed, draw, status FROM runs")
            return {tuple(r[:5]): r[5] for r in cur}
        except sqlite3.DatabaseError as e:
            raise InputError(self.path, "", f"not a results store of this tool ({e})") from None

    def summary(self, key: tuple) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT summary_json FROM runs WHERE scenario_hash=? AND policy_label=? AND params_hash=? "
            "AND seed=? AND draw=? AND status='ok'",
            key,
        ).fetchone()
        sm = self._json(row[0], f"runs (seed {key[3]}, draw {key[4]})", "a run's summary") if row and row[0] else None
        return sm if isinstance(sm, dict) else None

    def detail(self, key: tuple) -> bytes | None:
        """The packed per-request end-to-end latencies kept for baseline runs (checked: `_packed`)."""
        row = self.conn.execute(
            "SELECT detail FROM runs WHERE scenario_hash=? AND policy_label=? AND params_hash=? "
            "AND seed=? AND draw=? AND status='ok'",
            key,
        ).fetchone()
        return self._packed(row[0], f"runs (seed {key[3]}, draw {key[4]})") if row and row[0] is not None else None

    def check_details(self) -> None:
        """Every stored run's packed latencies unpack (what --resume hands the runs that compare with them)."""
        try:
            for n, (blob,) in enumerate(self.conn.execute("SELECT detail FROM runs WHERE detail IS NOT NULL"), 1):
                self._packed(blob, f"runs, detail {n}")
        except sqlite3.DatabaseError as e:
            raise InputError(self.path, "", f"cannot read the results store ({e})") from None

    def _packed(self, blob: object, where: str) -> bytes:
        """A detail blob: zlib-packed float32 values (experiments.sweep.worker.pack_e2e)."""
        try:
            if isinstance(blob, (bytes, memoryview)) and len(zlib.decompress(bytes(blob))) % 4 == 0:
                return bytes(blob)
        except zlib.error:
            pass
        raise InputError(self.path, where, f"its packed latencies do not unpack; {DAMAGED}")

    def rows(self, with_timeline: bool = False) -> Iterator[dict[str, Any]]:
        cols = [
            "scenario_hash",
            "policy_label",
            "params_hash",
            "seed",
            "draw",
            "regime",
            "policy",
            "params_json",
            "status",
            "error",
            "summary_json",
            "reference_json",
            "attempts",
        ]
        if with_timeline:
            cols.append("timeline_json")
        try:
            cur = self.conn.execute(
                f"SELECT {', '.join(cols)} FROM runs ORDER BY scenario_hash, policy_label, params_hash, seed, draw"
            )
            for n, r in enumerate(cur, 1):
                yield self._row(n, dict(zip(cols, r)), with_timeline)
        except sqlite3.DatabaseError as e:
            raise InputError(self.path, "", f"cannot read the results store ({e})") from None

    def _row(self, n: int, d: dict[str, Any], with_timeline: bool) -> dict[str, Any]:
        """One stored run, checked as the analysis reads it: whole seed and draw, a known status,
        params a mapping, an `ok` run's summary a mapping, the rest JSON or nothing."""
        where = f"runs, row {n}"
        for k in ("seed", "draw", "attempts"):
            if isinstance(d[k], bool) or not isinstance(d[k], int) or d[k] < 0:
                raise InputError(self.path, where, f"its {k} is not a whole number >= 0; {DAMAGED}")
        if d["status"] not in ("ok", "error"):
            raise InputError(self.path, where, f"its status is neither ok nor error; {DAMAGED}")
        d["params"] = self._json(d.pop("params_json"), where, "its params")
        raw_s, raw_r = d.pop("summary_json"), d.pop("reference_json")
        d["summary"] = self._json(raw_s, where, "its summary") if raw_s is not None else None
        d["reference"] = self._json(raw_r, where, "its reference") if raw_r is not None else None
        if with_timeline:
            raw = d.pop("timeline_json")
            d["timeline"] = self._json(raw, where, "its timeline") if raw is not None else None
        shapes = (("params", d["params"]), ("reference", d["reference"] or {}), ("timeline", d.get("timeline") or {}))
        bad = [k for k, v in shapes if not isinstance(v, dict)]
        if d["status"] == "ok" and not isinstance(d["summary"], dict):
            bad.append("summary (an ok run has one)")
        if bad:
            raise InputError(self.path, where, f"its {', '.join(bad)} is not a mapping; {DAMAGED}")
        return d

    def counts(self) -> dict[str, int]:
        try:
            cur = self.conn.execute("SELECT status, count(*) FROM runs GROUP BY status")
            return {k: v for k, v in cur}
        except sqlite3.DatabaseError as e:
            raise InputError(self.path, "", f"cannot read the results store ({e})") from None
