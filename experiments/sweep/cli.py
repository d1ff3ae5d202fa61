"""The sweep commands: sweep, report, export.

wadiloco sweep SWEEP.yaml --out DIR [--workers N] [--backend local|dask] [--scheduler ADDR] [--resume]
wadiloco report DIR
wadiloco export DIR --format csv|parquet [--output FILE]
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from urllib.parse import quote

from wadiloco.models.errors import InputError
from wadiloco.models.spec.limits import check_count


def _positive_int(v: str) -> int:
    import argparse

    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {v!r}") from None
    if n < 1 or n > 4096:
        raise argparse.ArgumentTypeError(f"must be between 1 and 4096, got {n}")
    return n


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run regimes x policies x seeds with the calibration protocol")
    p.add_argument("sweep", help="sweep YAML (see experiments/smoke.yaml)")
    p.add_argument("--out", required=True, help="output folder: runs.sqlite, CSVs, report, figures/")
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="worker processes (default: the number of cores; with --scheduler: the cluster's)",
    )
    p.add_argument(
        "--backend",
        choices=["local", "dask"],
        default="local",
        help="local worker processes, or Dask (needs the [dask] extra)",
    )
    p.add_argument("--scheduler", metavar="ADDR", help="address of an existing Dask scheduler (implies --backend dask)")
    p.add_argument("--resume", action="store_true", help="continue a sweep in --out: skip completed runs, retry failed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-figures", action="store_true", help="skip the figures (CSVs and report only)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="re-render a sweep's CSVs, figures and report from its store")
    p.add_argument("dir", help="a sweep's output folder")
    p.add_argument("--no-figures", action="store_true", help="skip the figures (CSVs and report only)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="export a sweep's store as one tidy table (one row per run)")
    p.add_argument("dir", help="a sweep's output folder")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv", help="parquet needs the [parquet] extra")
    p.add_argument("--output", help="file to write (default: DIR/export.csv or DIR/export.parquet)")
    p.set_defaults(func=cmd_export)


def _print_verdicts(summary) -> None:
    for reg, s in summary.groupby("regime", sort=False):
        print(f"{reg}:")
        for row in s.itertuples(index=False):
            if row.role != "policy":
                continue
            se = row.sync_excess_mean
            ses = "n/a" if math.isnan(se) else f"{se * 100:+.2f} pts"
            print(f"  {row.policy:<32} sync-excess {ses:>11}  {row.verdict}")


def cmd_sweep(args) -> int:
    from wadiloco.experiments.report import render
    from wadiloco.experiments.sweep import execute_plan, load_sweep

    if args.scheduler and args.backend != "dask":
        args.backend = "dask"
    if args.backend == "local" and args.workers is not None:
        check_count("workers", args.workers, "<command line>", "--workers", "local worker processes")
    plan = load_sweep(args.sweep)
    if args.scheduler:
        from wadiloco.experiments.sweep.backends import probe_scheduler

        probe_scheduler(args.scheduler)  # before anything is created: is it a Dask scheduler at all?
    t0 = time.perf_counter()
    try:
        oc = execute_plan(
            plan,
            args.out,
            workers=args.workers,
            backend=args.backend,
            scheduler=args.scheduler,
            resume=args.resume,
            progress=not args.no_progress,
        )
    except KeyboardInterrupt as e:
        sys.stderr.write(_stopped(e, Path(args.out)) + "\n")
        e.reported = True  # experiments.cli exits with the signal's code and says nothing more
        raise
    wall = time.perf_counter() - t0
    res = render(args.out, figures=not args.no_figures)
    out = Path(args.out)
    print(
        f"sweep {plan.name}: {oc.total} runs ({oc.skipped} already done, {oc.ran} run now, "
        f"{oc.errors} failed) on {oc.backend} with {oc.workers} worker(s) in {wall:.1f} s"
    )
    _print_verdicts(res["summary"])
    loads = res["loads"]
    if len(loads) and not loads["matched"].all():
        print("WARNING: some policies saw different loads on the same seed; see report.md")
    print(f"results: {out / 'runs.csv'}, {out / 'summary.csv'}, {out / 'report.md'}, {out / 'report.html'}")
    errs = res["runs"]["status"].eq("error").sum()
    if errs:
        sys.stderr.write(
            f"{errs} run(s) failed (see the `error` column of runs.csv); rerun with --resume to retry them\n"
        )
        return 1
    return 0


def _stopped(e: KeyboardInterrupt, out: Path) -> str:
    """What a stopped sweep says: by what, what is saved, and how to go on."""
    import sqlite3

    from wadiloco.experiments.store import STORE_NAME

    by = f"stopped by {e}" if str(e).startswith("SIG") else "interrupted"
    store = out / STORE_NAME
    try:
        con = sqlite3.connect(f"file:{quote(str(store.absolute()))}?mode=ro", uri=True, timeout=5)
        try:
            n = con.execute("SELECT count(*) FROM runs WHERE status = 'ok'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return f"{by} before any run was stored; nothing to resume"
    return (
        f"{by}: {n} completed run(s) are saved in {store} (with its -wal file, if any); "
        "rerun the same command with --resume to continue"
    )


def cmd_report(args) -> int:
    from wadiloco.experiments.report import render

    d = Path(args.dir)
    if not d.is_dir():
        raise InputError(d, "", "no such folder")
    res = render(d, figures=not args.no_figures)
    _print_verdicts(res["summary"])
    print(
        f"wrote {d / 'report.md'}, {d / 'report.html'}, runs.csv, summary.csv"
        + (f" and {len(res['figures'])} figures" if res["figures"] else "")
    )
    return 0


def cmd_export(args) -> int:
    from wadiloco.experiments.output import write_atomic, write_target
    from wadiloco.experiments.report import FLOAT_FORMAT
    from wadiloco.experiments.sweep.export import csv_text, export_table, parquet_bytes

    d = Path(args.dir)
    if not d.is_dir():
        raise InputError(d, "", "no such folder")
    if args.format == "parquet":
        from wadiloco.experiments.extras import require

        require("pyarrow", "Parquet export", "--format parquet")  # before reading the store
    target = Path(args.output) if args.output else d / f"export.{args.format}"
    write_target(target, "--output" if args.output else "")  # a regular file (or a new one), before any work
    df = export_table(d)
    write_atomic(target, csv_text(df, FLOAT_FORMAT) if args.format == "csv" else parquet_bytes(df))
    print(f"wrote {len(df)} runs x {df.shape[1]} columns to {target}")
    return 0
