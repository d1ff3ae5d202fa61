"""Fit the testbed twin to Stage 10 (and to nothing else of the testbed).

For each of the eight Stage 10 runs (models/data/testbed/stage10.yaml) the twin has three numbers:
L_u (a batch's latency with the GPU to itself), L_s (with the co-tenant on), and the serving start
delay (engine init). How they are read off the measurements:
- targeted runs (stress only in sync windows, or only under high pressure): L_u and L_s are the p95 of
  the clean unstressed and stressed bins (sync-inactive / low, and sync-active / high);
- `both` runs, whose every bin holds stressed batches: L_s is the run's p95 (the stressed level) and
  L_u is solved so that the simulated request count matches the measured one;
- every run: the start delay is solved so that the simulated span (first to last batch start)
  matches the measured one (output tokens / tok/s).
The simulation is the fluid of models.testbed.fluid on the run's exact stress timetable
(models.timetables, models.testbed.pressure), with the stress loop's 50-ms polling. Then
w = L_s / L_u - 1 is the co-tenant's weight against a serving job of weight 1, and L_u / O the GPU
time of one engine iteration (a batch of O new tokens runs O iterations: one prefill that yields the
first token, then O - 1 decodes; the prefill of the testbed's repeated prompts is assumed
prefix-cached, so it costs one iteration).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from wadiloco.models import timetables
from wadiloco.models.testbed import fluid, metrics, pressure, prompts
from wadiloco.models.testbed.metrics import summarize
from wadiloco.models.workload import prompt_sets

STAGE10 = "testbed/stage10.yaml"
STORED = "testbed/stage10_fit.json"  # the solved fits, written by `python -m wadiloco.models.testbed.fit --write`


@lru_cache(maxsize=1)
def stage10() -> dict:
    """The packaged Stage 10 matrix: settings and measurements of the eight runs."""
    return yaml.safe_load(resources.files("wadiloco.models.data").joinpath(STAGE10).read_text())


def run_spec(name: str) -> dict:
    for r in stage10()["runs"]:
        if r["name"] == name:
            return r
    raise KeyError(f"no Stage 10 run named {name!r}")


def outputs_of(settings: dict):
    """Per-slot output lengths: the 0.5B baseline's short prompts stop early on one slot."""
    if settings["prompts"] == "short" and settings["max_new_tokens"] == 32:
        return prompts.BASELINE_0P5B_OUTPUT
    return int(settings["max_new_tokens"])


def stress_timetable(mode: str, horizon: float) -> timetables.Timetable | None:
    sync = timetables.periodic(37.0, 8.0, horizon=horizon)
    press = pressure.pressure(90.0, horizon=horizon)
    return {"both": sync | press, "sync": sync, "pressure": press, "off": None}[mode]


def _batches(settings: dict, l_u: float, l_s: float, start_delay: float):
    """The run's batches and the per-request output lengths of batch k (k mod 4 decides them)."""
    dur = float(settings["duration_s"])
    c = int(settings["concurrency"])
    outs = outputs_of(settings)
    o_ref = outs if isinstance(outs, int) else max(outs)
    pattern = [prompts.output_batch(outs, k * c, c) for k in range(prompts.SLOTS)]
    cost = [(l_u * int(o.max()) / o_ref, c, int(o.sum())) for o in pattern]
    table = stress_timetable(settings["stress"]["mode"], dur + 10 * l_s)
    intervals = fluid.stress_intervals(table.intervals) if table is not None else []
    b = fluid.closed_loop(start_delay, dur, lambda k, _t: cost[k % prompts.SLOTS], intervals, l_s / l_u - 1.0)
    return b, pattern


def simulate_run(settings: dict, l_u: float, l_s: float, start_delay: float) -> dict:
    """The twin's Stage 10 figures for one run, given its three numbers (seconds)."""
    b, pattern = _batches(settings, l_u, l_s, start_delay)
    start = np.repeat(b.start, b.size)
    lat = np.repeat(b.latency, b.size)
    out = np.concatenate([pattern[k % prompts.SLOTS] for k in range(len(b.size))])
    sync = timetables.periodic(37.0, 8.0, horizon=float(b.end[-1]) + 1.0).active(start)
    return summarize(start, lat, out, sync, pressure.max_pressure(start, 90.0))


def _span(m: dict) -> float:
    return m["output_tokens"] / m["tokens_per_s"]


@dataclass(frozen=True)
class RunFit:
    name: str
    l_u: float
    l_s: float
    start_delay: float
    how: str

    @property
    def weight(self) -> float:
        return self.l_s / self.l_u - 1.0


def _delay_for(settings: dict, l_u: float, l_s: float, delay: float, span: float) -> float:
    """Start delay whose simulated span matches `span` (fixed-point steps: the span moves one for one)."""
    for _ in range(6):
        got = _span(simulate_run(settings, l_u, l_s, delay))
        if abs(got - span) < 1e-6:
            break
        delay += got - span
    return delay


def _l_u_for(settings: dict, l_s: float, delay: float, requests: int) -> float:
    """L_u whose simulated request count is closest to `requests` (bisection; count falls as L_u grows)."""
    lo, hi = 0.3 * l_s, l_s
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if int(_batches(settings, mid, l_s, delay)[0].size.sum()) > requests:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_run(name: str) -> RunFit:
    """A run's fit: the stored one when it was solved from today's measurements and code (solving the
    six `both` runs takes ~10 s per process, and every worker of a sweep or test run needs them),
    else solved afresh; both give the same numbers bit for bit (tests/testbed/test_testbed_fit.py)."""
    stored = _stored().get(name)
    return stored if stored is not None else solve_run(name)


def inputs_digest() -> str:
    """What a fit depends on: the Stage 10 file and the source of every module that simulates or solves."""
    h = hashlib.sha256(resources.files("wadiloco.models.data").joinpath(STAGE10).read_bytes())
    for m in (fluid, prompts, prompt_sets, timetables, pressure, metrics, sys.modules[__name__]):
        h.update(Path(m.__file__).read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def _stored() -> dict[str, RunFit]:
    f = resources.files("wadiloco.models.data").joinpath(STORED)
    if not f.is_file():
        return {}
    doc = json.loads(f.read_text())
    if doc.get("digest") != inputs_digest():
        return {}  # stale: the measurements or the code changed since it was written
    return {k: RunFit(name=k, **v) for k, v in doc["fits"].items()}


def stored_document(fits) -> str:
    """The stored-fit file for `fits` (JSON floats round-trip exactly)."""
    body = {f.name: {k: v for k, v in asdict(f).items() if k != "name"} for f in fits}
    return json.dumps({"digest": inputs_digest(), "fits": body}, indent=1) + "\n"


@lru_cache(maxsize=16)
def solve_run(name: str) -> RunFit:
    r = run_spec(name)
    s, m = r["settings"], r["measured"]
    span = m["output_tokens"] / m["tokens_per_s"]
    delay = s["duration_s"] - span - 0.5
    mode = s["stress"]["mode"]
    if mode in ("sync", "pressure"):
        clean, stressed = ("sync_inactive", "sync_active") if mode == "sync" else ("low", "high")
        l_u, l_s = m[clean]["p95_ms"] / 1e3, m[stressed]["p95_ms"] / 1e3
        return RunFit(name, l_u, l_s, _delay_for(s, l_u, l_s, delay, span), f"clean bins ({clean} / {stressed} p95)")
    l_s = m["p95_ms"] / 1e3
    l_u = l_s / 1.5
    for _ in range(3):
        l_u = _l_u_for(s, l_s, delay, m["requests"])
        delay = _delay_for(s, l_u, l_s, delay, span)
    return RunFit(name, l_u, l_s, delay, "L_s = p95; L_u from the request count")


@lru_cache(maxsize=1)
def fit_all() -> tuple[RunFit, ...]:
    return tuple(fit_run(r["name"]) for r in stage10()["runs"])


def solve_all() -> tuple[RunFit, ...]:
    return tuple(solve_run(r["name"]) for r in stage10()["runs"])


class Stage10:
    """The Stage 10 matrix as an engine profile's measurements (models.engine.profiles.Measurements):
    a run's iteration is L_u over the O iterations of a batch of O new tokens."""

    def runs(self) -> set[str]:
        return {r["name"] for r in stage10()["runs"]}

    def digest(self) -> str:
        return inputs_digest()

    def iteration(self, run: str) -> tuple[float, int]:
        s = run_spec(run)["settings"]
        outs = outputs_of(s)
        o = outs if isinstance(outs, int) else max(outs)
        return fit_run(run).l_u / o, int(s["concurrency"])

    def start_delay(self, run: str) -> float:
        return fit_run(run).start_delay

    def cotenant_weight(self, run: str) -> float:
        return fit_run(run).weight


FIGURES = ("requests", "p50_ms", "p95_ms", "p99_ms", "tokens_per_s", "sync_ratio", "high_low_ratio")


def in_sample(fits=None) -> list[dict]:
    """Per run: measured and simulated figures and the relative error of each."""
    rows = []
    for f in fits or fit_all():
        r = run_spec(f.name)
        sim = simulate_run(r["settings"], f.l_u, f.l_s, f.start_delay)
        meas = r["measured"]
        err = {k: sim[k] / meas[k] - 1.0 for k in FIGURES}
        rows.append({"run": f.name, "fit": f, "measured": meas, "simulated": sim, "rel_err": err})
    return rows


def main(argv=None) -> int:
    """`--write`: solve every run and store the fits in the package (run it after changing the Stage 10
    file or the fit's code; tests/testbed/test_testbed_fit.py says when it is due). `--check`: exit 1 if stale."""
    ap = argparse.ArgumentParser(prog="python -m wadiloco.models.testbed.fit", description=main.__doc__)
    ap.add_argument("--write", action="store_true", help="solve all runs and write " + STORED)
    ap.add_argument("--check", action="store_true", help="exit 1 if the stored fits are stale")
    args = ap.parse_args(argv)
    if args.write:
        path = Path(str(resources.files("wadiloco.models.data").joinpath(STORED)))
        path.write_text(stored_document(solve_all()))
        print(f"wrote {path}")
    fresh = bool(_stored()) or args.write
    print("stored fits: current" if fresh else "stored fits: stale or missing (run with --write)")
    return 0 if fresh else 1


if __name__ == "__main__":
    raise SystemExit(main())
