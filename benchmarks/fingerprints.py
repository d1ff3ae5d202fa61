"""Fingerprints of many short runs, to show a speed change changed no result.

A fingerprint is a sha256 of a run's request table, timeline and summary (without its wall time),
byte for byte. The grid: every shipped scenario x 5 engine variants x 6 policies x seeds 0, 1 x
tape sharing on/off (2,280 runs, ~80 s compiled on 2 cores), and every shipped scenario x 3 fleets
fed from outside (disaggregated, with a KV pool, a remote KV pool: engines on bounds of their own)
x 3 policies x seeds 0, 1, a third of the horizon each (126 runs, and an error for each testbed
scenario, whose fleet cannot take them; ~30 s compiled: a backlog of KV flows behind an
over-offered link makes a fed run's cost grow with the square of its horizon; they never share
tapes). Capture in two trees and compare:

    python -m wadiloco.benchmarks.fingerprints capture OUT.json [--horizon 30]
    WADILOCO_PURE=1 python -m wadiloco.benchmarks.fingerprints capture OUT_PURE.json
    python -m wadiloco.benchmarks.fingerprints compare A.json B.json

A run that errors (a policy that does not fit an override) is fingerprinted by its error type, so
both trees must fail alike. Trace replays read their traces from ../shared/ beside the checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from wadiloco.experiments import runner
from wadiloco.models.engine import _fast as core
from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import load_scenario, with_overrides

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "scenarios" / "testbed").glob("*.yaml"))
VARIANTS = {
    "plain": {},
    "kv": {"engine.kv_blocks": 4000},
    "seq": {"engine.step": "sequential", "engine.host_per_seq_s": 1e-5},
    "prefix": {
        "engine.kv_blocks": 4000,
        "engine.prefix_cache": 16384,
        "engine.shared_prefix": {"fraction": 0.5, "prompts": 4, "tokens": 1024},
    },
    "swap": {"engine.kv_blocks": 4000, "engine.preemption": "swap"},
}
POLICIES = ("no_sync", "fixed", "pressure_gated", "wa_diloco", "online_forecast", "matched_random")
FED_VARIANTS = {
    "disagg": {"disagg": {"prefill_sidecars": [0, 1, 2]}},
    "disagg_kv": {"engine.kv_blocks": 4000, "disagg": {"prefill_sidecars": [1, 4]}},
    "remote_kv": {**VARIANTS["prefix"], "remote_kv": {}},
}
FED_POLICIES = ("fixed", "pressure_gated", "wa_diloco")
SEEDS = (0, 1)


def digest(res) -> str:
    h = hashlib.sha256()
    for part in (res.requests, res.timeline):
        for k in sorted(part):
            a = np.ascontiguousarray(part[k])
            h.update(f"{k}:{a.dtype.str}:{a.shape}".encode())
            h.update(a.tobytes())
    s = dict(res.summary)
    s.pop("wall_time_s", None)
    h.update(repr(sorted(s.items())).encode())
    return h.hexdigest()


def _scenario(path: Path, overrides: dict, horizon: float):
    sc = load_scenario(path)
    ov = dict(overrides)
    if sc.engine.model is not None:  # an engine profile's model is the whole iteration
        ov = {k: v for k, v in ov.items() if not k.startswith("engine.host_per")}
    return with_overrides(sc, {"horizon_s": horizon, "drain_s": 5.0, **ov})


def capture(horizon: float, scenarios=SCENARIOS, variants=None, policies=POLICIES) -> dict[str, str]:
    """Both grids (module docstring), or `variants` x `policies` alone."""
    if variants is not None:
        grids = [(variants, policies, horizon, (True, False))]
    else:
        grids = [(VARIANTS, POLICIES, horizon, (True, False)), (FED_VARIANTS, FED_POLICIES, horizon / 3, (False,))]
    out: dict[str, str] = {}
    for vs, pols, h, shares in grids:
        for path in scenarios:
            out.update(_grid(path, vs, pols, h, shares))
    return out


def _grid(path: Path, variants: dict, policies, horizon: float, shares) -> dict[str, str]:
    out: dict[str, str] = {}
    for vname, ov in variants.items():
        try:
            sc = _scenario(path, ov, horizon)
        except InputError as e:
            out[f"{path.stem}/{vname}"] = f"error: {type(e).__name__}"
            continue
        for share in shares:
            runner._tapes.clear()
            for seed in SEEDS:
                for pol in policies:
                    key = f"{path.stem}/{vname}/{pol}/seed{seed}/share{int(share)}"
                    try:
                        res = runner.run_one(sc, seed, pol, None, share=share)
                    except Exception as e:  # noqa: BLE001 (both trees must fail alike)
                        out[key] = f"error: {type(e).__name__}"
                        continue
                    out[key] = digest(res)
    return out


def compare(a: dict[str, str], b: dict[str, str]) -> int:
    keys = sorted(set(a) | set(b))
    differ = [k for k in keys if a.get(k) != b.get(k)]
    errors = sum(v.startswith("error") for v in a.values())
    print(f"{len(keys)} keys, {len(keys) - len(differ)} identical, {len(differ)} differ, {errors} errors (in A)")
    for k in differ[:40]:
        print(f"  {k}: {a.get(k, '-')[:16]} != {b.get(k, '-')[:16]}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wadiloco.benchmarks.fingerprints", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("out", type=Path)
    c.add_argument("--horizon", type=float, default=30.0)
    k = sub.add_parser("compare")
    k.add_argument("a", type=Path)
    k.add_argument("b", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "compare":
        return compare(json.loads(args.a.read_text()), json.loads(args.b.read_text()))
    t0 = time.perf_counter()
    fp = capture(args.horizon)
    args.out.write_text(json.dumps(fp, indent=0, sort_keys=True))
    print(f"{len(fp)} fingerprints ({core.KIND} core) in {time.perf_counter() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
