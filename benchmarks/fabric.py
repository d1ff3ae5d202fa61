"""Runs with many flows in flight: the disaggregated and remote-KV fleets beside plain runs of the same
fleets, timed side by side against another tree.

    python -m wadiloco.benchmarks.fabric [--other PYTHON] [--runs N] [--json]

Each case runs in a fresh child process (`PYTHON -c`), which builds the scenario from a dict, runs it
once (models.spec.load.scenario_from_dict, sim.fleet.simulate) and reports the CPU seconds of that
call (`cpu_s`) and the fingerprint of its results (benchmarks.fingerprints.digest); `process_cpu_s` is
the whole child's CPU, imports included, about what `wadiloco run` costs. With `--other`, the same
cases also run under another tree's interpreter (its own virtual environment, e.g. the tree before a
change), alternated run by run (this tree, the other, this tree, ...), so machine load hits both
alike; the report gives each case's median CPU seconds per tree, its ratio to the plain run of the
same fleet, and whether both trees' results are identical.

The cases (docs/performance.md, "Many flows in flight"):
  plain_8 / disagg_7p1     the default fleet (4 islands x 2 hosts, one sidecar each), 60 s of
                           `normal` load 0.5; disagg_7p1 prefills on sidecars 0-6 and decodes on 7,
                           so every KV hand-off crosses the WAN into one island (~2,000 in flight);
  plain_32 / remote_kv_32  32 islands x 2 hosts with prefix caches and shared system prompts,
                           60 s of `normal` load 0.15; remote_kv_32 pools the caches (fetches over
                           the WAN).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys

BASE = {"horizon_s": 60, "workload": {"kind": "normal", "load": 0.5}, "policy": {"name": "fixed", "params": {"H": 256}}}
POOL = {
    "horizon_s": 60,
    "drain_s": 30,
    "fleet": {"islands": 32, "hosts_per_island": 2},
    "engine": {"prefix_cache": 8192, "shared_prefix": {"fraction": 0.8, "prompts": 3, "tokens": 2048}},
    "merge": {"h_min": 8, "h_max": 16},
    "policy": {"name": "fixed", "params": {"H": 8}},
    "workload": {"kind": "normal", "load": 0.15},
}
CASES = {  # name: (scenario, the plain case of the same fleet)
    "plain_8": ({"name": "plain_8", **BASE}, "plain_8"),
    "disagg_7p1": ({"name": "disagg_7p1", **BASE, "disagg": {"prefill_sidecars": list(range(7))}}, "plain_8"),
    "plain_32": ({"name": "plain_32", **POOL}, "plain_32"),
    "remote_kv_32": ({"name": "remote_kv_32", **POOL, "remote_kv": {}}, "plain_32"),
}
CHILD = """
import json, sys, time
from wadiloco.benchmarks.fingerprints import digest
from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.sim.fleet import simulate
sc = scenario_from_dict(json.loads(sys.argv[1]))
t0, w0 = time.process_time(), time.perf_counter()
res = simulate(sc, 0)
print(json.dumps({"cpu_s": time.process_time() - t0, "wall_s": time.perf_counter() - w0, "digest": digest(res)}))
"""


def run_case(python: str, scenario: dict) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([python, "-c", CHILD, json.dumps(scenario)], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["process_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return got


def measure(trees: dict[str, str], runs: int) -> dict:
    """{case: {tree: {"cpu_s": median, "wall_s": median, "digest": ...}}}, trees alternated run by run."""
    got: dict = {c: {t: [] for t in trees} for c in CASES}
    for _ in range(runs):
        for case, (scenario, _) in CASES.items():
            for tree, python in trees.items():
                got[case][tree].append(run_case(python, scenario))
    out: dict = {}
    for case, by_tree in got.items():
        out[case] = {}
        for tree, rs in by_tree.items():
            digests = {r["digest"] for r in rs}
            out[case][tree] = {
                "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                "process_cpu_s": statistics.median(r["process_cpu_s"] for r in rs),
                "wall_s": statistics.median(r["wall_s"] for r in rs),
                "digest": digests.pop() if len(digests) == 1 else "varies",
            }
    return out


def report(res: dict, trees: list[str]) -> str:
    head = " ".join(f"{t + ' run s':>12s} {'x plain':>8s} {t + ' process s':>16s} {'x plain':>8s}" for t in trees)
    lines = [f"{'case':14s} {head}  results"]
    for case, (_, plain) in CASES.items():
        cells = []
        for t in trees:
            r, p = res[case][t], res[plain][t]
            cells.append(f"{r['cpu_s']:12.2f} {r['cpu_s'] / p['cpu_s']:8.1f}")
            cells.append(f"{r['process_cpu_s']:16.2f} {r['process_cpu_s'] / p['process_cpu_s']:8.1f}")
        same = len({res[case][t]["digest"] for t in trees}) == 1
        lines.append(f"{case:14s} " + " ".join(cells) + ("  identical" if same else "  DIFFER"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wadiloco.benchmarks.fabric", description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", help="another tree's Python (its own virtual environment), timed alternately")
    ap.add_argument("--runs", type=int, default=3, help="runs per case and tree (the median is reported)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    trees = {"this": sys.executable, **({"other": args.other} if args.other else {})}
    res = measure(trees, max(1, args.runs))
    print(json.dumps(res, indent=1) if args.json else report(res, list(trees)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
