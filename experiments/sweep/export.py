"""The tidy table `wadiloco export` writes: every stored run, one row each.

Summary fields are flattened (dicts as `a.b` columns) and each run gets its sync-excess from the
protocol. `params` stays a mapping and list fields (`merge_steps`) stay lists: Parquet stores them
as struct and list columns, CSV (which has neither) as JSON text. Rows are in plan order (regime,
policy, seed, draw); there are no wall times or attempt counts, so the table is identical across
backends and sessions.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd

from wadiloco.experiments import protocol
from wadiloco.experiments.report import load
from wadiloco.models.results.metrics import SYNC_EXCESS

KEYS = ["regime", "policy", "seed", "draw"]
NESTED = ("params",)  # mapping columns; list columns are found by their values


def _record(r: dict[str, Any], regime: str) -> dict[str, Any]:
    rec = {
        "regime": regime,
        "policy": r["policy_label"],
        "policy_name": r["policy"],
        "seed": r["seed"],
        "draw": r["draw"],
        "status": r["status"],
        "error": r["error"] or "",
        "params": dict(r["params"] or {}),
        "scenario_hash": r["scenario_hash"],
        "params_hash": r["params_hash"],
    }
    for k, v in sorted((r["summary"] or {}).items()):
        if k in rec:
            continue
        if isinstance(v, dict):
            for k2, v2 in sorted(v.items()):
                rec[f"{k}.{k2}"] = v2
        else:
            rec[k] = list(v) if isinstance(v, (list, tuple)) else v
    return rec


def export_table(d: Path) -> pd.DataFrame:
    """The table with `params` as dicts and list fields as lists (see `csv_bytes`, `parquet_bytes`)."""
    plan, rows, store = load(d)
    store.close()
    regimes = {r.digest: r.name for r in plan.regimes}
    df = pd.DataFrame.from_records([_record(r, regimes.get(r["scenario_hash"], r["scenario_hash"])) for r in rows])
    if df.empty:
        return df
    order = {r.name: i for i, r in enumerate(plan.regimes)}
    arms = {a.label: i for i, a in enumerate(plan.arms)}
    df["_r"] = df["regime"].map(order).fillna(len(order))
    df["_a"] = df["policy"].map(arms).fillna(len(arms))
    df = df.sort_values(["_r", "_a", "seed", "draw"], kind="mergesort").drop(columns=["_r", "_a"])
    base = protocol.runs_table(plan, rows)
    df = df.merge(base[[*KEYS, SYNC_EXCESS]], on=KEYS, how="left", sort=False)
    return df.reset_index(drop=True)


def _nested_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c in NESTED or df[c].map(lambda v: isinstance(v, (list, dict))).any()]


def csv_text(df: pd.DataFrame, float_format) -> str:
    """CSV: mappings and lists as JSON text (keys sorted)."""
    out = df.copy()
    for c in _nested_columns(out):
        out[c] = out[c].map(lambda v: json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v)
    buf = io.StringIO()
    out.to_csv(buf, index=False, float_format=float_format, lineterminator="\n")
    return buf.getvalue()


def _arrow_column(values: list):
    """A struct or list column; a field whose values mix types (a name here, a number there)
    falls back to JSON text, since Parquet columns have one type."""
    import pyarrow as pa

    if all(isinstance(v, dict) or v is None for v in values):
        keys = sorted({k for v in values if v for k in v})
        if not keys:  # only empty mappings: Parquet has no struct without fields
            return pa.nulls(len(values))
        children = [_arrow_column([v.get(k) if v else None for v in values]) for k in keys]
        mask = pa.array([v is None for v in values])
        return pa.StructArray.from_arrays(children, names=keys, mask=mask)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else json.dumps(v, sort_keys=True) for v in values])


def parquet_bytes(df: pd.DataFrame) -> bytes:
    """Parquet (needs the [parquet] extra): `params` a struct column, list fields list columns."""
    from wadiloco.experiments.extras import require

    require("pyarrow", "Parquet export", "--format parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    nested = _nested_columns(df)
    flat = pa.Table.from_pandas(df.drop(columns=nested), preserve_index=False)
    arrays = {name: flat.column(name) for name in flat.column_names}
    arrays.update({c: _arrow_column(list(df[c])) for c in nested})
    table = pa.table({c: arrays[c] for c in df.columns})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()
