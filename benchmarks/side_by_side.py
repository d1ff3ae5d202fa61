"""bursty.yaml's realtime factor in this tree and in others, alternated in one run.

    python -m wadiloco.benchmarks.side_by_side --other PYTHON [--other PYTHON ...] [--rounds 3] [--runs 7]

Each round runs one fresh child process per tree (`PYTHON -c`, each tree's own virtual environment,
e.g. the tree before a change), in turn, so machine load hits every tree alike. A child runs the
fleet of bursty.yaml (fixed H=256, seed 0, fast-forward, 720 simulated seconds) `--runs` times each
on the compiled core, with the benchmark's KV pool and prefix cache (benchmarks.bursty KV), and on
the pure-Python core, and reports simulated seconds per CPU second of `Fleet.run()` from its
fastest run (the least disturbed by other processes). The report lists every round, so the spread is
visible. The child reads only what benchmarks.bursty has offered in every tree so far.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, sys, time
from wadiloco.benchmarks import bursty as b
runs = int(sys.argv[1])
sc = b.with_overrides(b.bursty_scenario(), {"engine.fast_forward": True})
cases = (("bursty", sc, b.core.serving), ("bursty_kv", b.with_overrides(sc, b.KV), b.core.serving),
         ("bursty_pure", sc, b.pure_serving))
out = {}
for name, s, mod in cases:
    xs = []
    for _ in range(runs):
        b.use_core(mod)
        fleet = b.Fleet(b.resolve(s), 0)
        t = time.process_time()
        fleet.run()
        xs.append(time.process_time() - t)
    b.use_core(b.core.serving)
    out[name] = round(720.0 / min(xs))
print(json.dumps(out))
"""


def child(python: str, runs: int) -> dict:
    out = subprocess.run([python, "-c", CHILD, str(runs)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    prog, what = "python -m wadiloco.benchmarks.side_by_side", __doc__.split("\n\n")[0]
    ap = argparse.ArgumentParser(prog=prog, description=what)
    ap.add_argument("--other", action="append", default=[], help="another tree's Python, timed in turn (repeatable)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (one child per tree each)")
    ap.add_argument("--runs", type=int, default=7, help="runs per case in a child (the fastest is kept)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    trees = {"this": sys.executable, **{f"other{i + 1}": p for i, p in enumerate(args.other)}}
    got: dict = {t: [] for t in trees}
    for _ in range(max(1, args.rounds)):
        for tree, python in trees.items():
            got[tree].append(child(python, max(1, args.runs)))
    if args.json:
        print(json.dumps(got, indent=1))
        return 0
    for tree, rounds in got.items():
        for key in rounds[0]:
            print(f"{tree:8s} {key:12s} " + " ".join(f"{r[key]:>8,d}" for r in rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
