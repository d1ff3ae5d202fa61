"""The tidy table `wadiloco export` writes: every stored run, one row each.

Summary fields are flattened (dicts as `a.b` columns, lists as JSON) and each run gets its
sync-excess from the protocol. Rows are in plan order (regime, policy, seed, draw); there are no
wall times or attempt counts, so the table is identical across backends and sessions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from wadiloco.experiments import protocol
from wadiloco.experiments.report import load
from wadiloco.models.metrics import SYNC_EXCESS

KEYS = ["regime", "policy", "seed", "draw"]


def _record(r: dict[str, Any], regime: str) -> dict[str, Any]:
    rec = {
        "regime": regime,
        "policy": r["policy_label"],
        "policy_name": r["policy"],
        "seed": r["seed"],
        "draw": r["draw"],
        "status": r["status"],
        "error": r["error"] or "",
        "params": json.dumps(r["params"], sort_keys=True),
        "scenario_hash": r["scenario_hash"],
        "params_hash": r["params_hash"],
    }
    for k, v in sorted((r["summary"] or {}).items()):
        if k in rec:
            continue
        if isinstance(v, dict):
            for k2, v2 in sorted(v.items()):
                rec[f"{k}.{k2}"] = v2
        elif isinstance(v, list):
            rec[k] = json.dumps(v)
        else:
            rec[k] = v
    return rec


def export_table(d: Path) -> pd.DataFrame:
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
