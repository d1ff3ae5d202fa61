"""`wadiloco safe SCENARIO`: when is a merge safe here?

The sync-excess (SLO violations with merges minus the same seed's run without: common random
numbers) over a grid of load (a fraction of a sidecar's capacity, up to saturation) x merge interval
(`H` of a policy that has one; otherwise the policy's own placement), with bootstrap CIs over seeds;
the boundary of the region where it stays at or below a threshold; and at the boundary, each
`fleet.unlimited` control's effect (which resource decides it) and each mitigation's. Two sweeps run
it (experiments/sweep: local worker processes or Dask, plugins loaded in every worker, a store per
sweep that `--resume` continues): the grid, then the boundary cell's variants, whose place the grid
decides. The analysis is experiments/region.py; the text, report and figure experiments/safe_report.py.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wadiloco.models.errors import InputError

CLI = "<command line>"
DEFAULT_LOADS = tuple(round(0.05 * i, 2) for i in range(1, 21))  # 0.05 .. 1.0: up to saturation
DEFAULT_SEEDS = 4
RESOURCES = ("gpu", "host", "pcie", "nic", "links", "storage", "kv")  # fleet.unlimited's controls
MITIGATIONS = {  # a name in the outputs -> the scenario fields it sets
    "async checkpoints": {"merge.checkpoint_mode": "async"},
    "staggered checkpoints": {"merge.checkpoint_stagger": 1},
    "streaming (4 fragments)": {"merge.fragments": 4},
    "int8 compression": {"merge.compression": "int8"},
    "int4 compression": {"merge.compression": "int4"},
}
PLACEMENT = "workload-aware placement"  # wa_diloco at the boundary cell (or fixed, when the policy is wa_diloco)
CELL = "cell"  # the boundary cell's regime in the second sweep


def add_parser(sub) -> None:
    from wadiloco.experiments.commands import _scenario_args
    from wadiloco.experiments.sweep.cli import _positive_int

    p = sub.add_parser(
        "safe",
        help="when is a merge safe here? sync-excess over load x merge interval, the safe region's boundary, "
        "and what decides it (each unlimited resource, each mitigation)",
    )
    _scenario_args(p)
    p.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        metavar="PP",
        help="the most sync-excess a safe cell may have, in percentage points of SLO violations",
    )
    p.add_argument("--loads", metavar="L1,L2,...", help="loads, fractions of a sidecar's capacity (default 0.05..1.0)")
    p.add_argument(
        "--intervals",
        metavar="H1,H2,...",
        help="merge intervals in inner steps, for a policy with H (default: h_min, their geometric mean, h_max "
        "and the policy's own H)",
    )
    p.add_argument("--seeds", type=_positive_int, default=DEFAULT_SEEDS, help="seeds 0..N-1 per cell")
    p.add_argument("--horizon", type=float, metavar="SECONDS", help="override horizon_s for every run")
    p.add_argument("--workers", type=_positive_int, help="worker processes (default: the number of cores)")
    p.add_argument("--backend", choices=["local", "dask"], default="local", help="local processes, or Dask")
    p.add_argument("--scheduler", metavar="ADDR", help="address of a Dask scheduler (implies --backend dask)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument(
        "--out", help="new or empty folder for safe.md, safe.html, safe.png, safe.json, cells.csv and the runs"
    )
    p.add_argument("--force", action="store_true", help="overwrite an earlier safe result in --out")
    p.add_argument("--resume", action="store_true", help="continue a stopped safe in --out: its runs are kept")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_safe)


@dataclass
class Job:
    """What a `safe` runs: the scenario (--set applied), the policy, the grid and the flags, checked."""

    file: str
    sc: Any  # models.spec.load.Scenario
    sets: dict[str, Any]
    policy: str
    params: dict[str, Any]
    rows: dict[str, dict[str, Any]]  # row label -> the policy's params in that row
    loads: list[float]
    seeds: list[int]
    threshold: float
    horizon: float | None
    controls: list[str] = field(default_factory=list)
    mitigations: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # controls and mitigations that do not apply, and why

    def regime(self, load: float) -> str:
        return f"load={load:g}"


def _floats(text: str, flag: str) -> list[float]:
    from wadiloco.models.spec.schema import check_finite, load_yaml_text

    out = []
    for i, v in enumerate(x for x in text.split(",") if x.strip()):
        value = load_yaml_text(v, CLI, f"{flag} (value {i + 1})")
        check_finite(value, CLI, flag)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise InputError(CLI, flag, f"expected positive numbers separated by commas, got {v.strip()[:40]!r}")
        out.append(value)
    if not out:
        raise InputError(CLI, flag, "needs at least one value")
    return sorted(set(out))


def setup(args) -> Job:
    """Every check before anything runs or is created: an input error names the flag or field."""
    from wadiloco.experiments.commands import load_run
    from wadiloco.experiments.overrides import parse_sets
    from wadiloco.models.workload.kinds import WORKLOADS

    sc, r = load_run(args)
    policy, params = r.policy_name, dict(r.policy.params.model_dump(mode="json"))
    if policy == "no_sync" or r.policy.cls.takes_reference:
        why = "never merges" if policy == "no_sync" else "is a control that follows a reference"
        raise InputError(CLI, "--policy", f"{policy} {why}; name a policy that merges (e.g. fixed)")
    if not r.training.enabled:
        raise InputError(sc.source, "training.enabled", "training is off: no merge to make safe")
    kind = WORKLOADS[sc.workload.get("kind", "")]
    if "load" not in kind.params.model_fields:
        raise InputError(sc.source, "workload.kind", f"{kind.name} has no `load` to vary; safe needs one")
    thr = float(args.threshold)
    if not (math.isfinite(thr) and thr >= 0):
        raise InputError(CLI, "--threshold", "must be a finite number of percentage points >= 0")
    if args.horizon is not None and not (math.isfinite(args.horizon) and args.horizon > 0):
        raise InputError(CLI, "--horizon", "must be a finite number > 0")
    loads = _floats(args.loads, "--loads") if args.loads else list(DEFAULT_LOADS)
    for load in loads:
        at(sc, {"workload.load": load}, "--loads")
    rows = _rows(sc, policy, params, args.intervals)
    sets = dict(parse_sets(args.sets))
    job = Job(sc.source, sc, sets, policy, params, rows, loads, list(range(args.seeds)), thr, args.horizon)
    _variants(job, r.engine.kv is not None or r.engine.kv_holder is not None)
    _check_size(job)
    return job


def at(sc, overrides: dict[str, Any], flag: str):
    """The scenario with `overrides`, or an input error naming `flag` and the field."""
    from wadiloco.models.spec.load import with_overrides

    try:
        return with_overrides(sc, overrides)
    except InputError as e:
        raise InputError(CLI, flag, f"{e.where + ': ' if e.where else ''}{e.message}") from None


def _rows(sc, policy: str, params: dict[str, Any], intervals: str | None) -> dict[str, dict[str, Any]]:
    """The grid's rows: `H=...` for each merge interval of a policy with `H` (checked against the
    corridor), else the policy's own placement, one row."""
    from wadiloco.models.policies import POLICIES
    from wadiloco.models.spec.load import check_policy

    if "H" not in POLICIES[policy].Params.model_fields:
        if intervals:
            raise InputError(CLI, "--intervals", f"{policy} has no merge interval H; it places merges itself")
        return {policy: params}
    lo, hi = sc.merge.h_min, sc.merge.h_max
    own = [params["H"]] if lo <= params.get("H", 0) <= hi else []  # the scenario's own interval is a row
    hs = _floats(intervals, "--intervals") if intervals else sorted({lo, round(math.sqrt(lo * hi)), hi, *own})
    rows = {}
    for h in hs:
        if h != int(h):
            raise InputError(CLI, "--intervals", f"a merge interval is a whole number of steps, got {h:g}")
        p = {**params, "H": int(h)}
        try:
            check_policy(sc, policy, p, CLI, "--intervals")
        except InputError as e:
            raise InputError(CLI, "--intervals", f"H={int(h)}: {e.message}") from None
        rows[f"H={int(h)}"] = p
    return rows


def _variants(job: Job, has_kv_pool: bool) -> None:
    """The boundary cell's controls (each `fleet.unlimited` resource not unlimited already; `kv` only
    with a KV pool) and mitigations (each that is not on already and fits the scenario)."""
    sc = job.sc
    for res in RESOURCES:
        if res in sc.fleet.unlimited:
            job.skipped.append(f"unlimited {res}: already unlimited in the scenario")
        elif res == "kv" and not has_kv_pool:
            job.skipped.append("unlimited kv: the fleet has no KV pool (engine.kv_blocks, engine.gpu_memory_gb)")
        else:
            job.controls.append(res)
    current = sc.model_dump(mode="json")
    for name, fields in MITIGATIONS.items():
        now = {k: _get(current, k) for k in fields}
        if all(now[k] == v for k, v in fields.items()) or (
            name.startswith("int") and now.get("merge.compression") != "none"
        ):
            job.skipped.append(
                f"{name}: the scenario has it already ({', '.join(f'{k}: {v}' for k, v in now.items())})"
            )
            continue
        if "ckpt" not in sc.merge.phases and "checkpoint" in name:
            job.skipped.append(f"{name}: the scenario's merges write no checkpoint (merge.phases)")
            continue
        try:
            at(sc, fields, "mitigation")
        except InputError as e:
            job.skipped.append(f"{name}: does not apply ({e.message})")
            continue
        job.mitigations[name] = fields


def _get(data: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def _check_size(job: Job) -> None:
    """Refuse, before anything runs, more runs than $WADILOCO_MAX_RUNS, or a run over the limits at
    the top load."""
    from wadiloco.models.spec.limits import check_count, check_run

    grid = len(job.loads) * len(job.seeds) * (1 + len(job.rows))
    boundary = (1 + len(job.controls) + len(job.mitigations)) * len(job.seeds) * 2 + len(job.seeds)
    check_count("runs", grid + boundary, CLI, "--loads", "runs this map needs", "--seeds")
    top = {"workload.load": max(job.loads), **({"horizon_s": job.horizon} if job.horizon else {})}
    check_run(at(job.sc, top, "--loads"), file=CLI, prefix="at the top load: ")


# ---- the two sweeps ---------------------------------------------------------------------------------


def _plan(job: Job, name: str, regimes: list[dict], arms: list[dict]):
    """A sweep plan (experiments.sweep.plan) over the scenario file with --set applied to every regime
    (the policy's own fields aside: the arms name the policy)."""
    from wadiloco.experiments.sweep.plan import build_plan
    from wadiloco.experiments.sweep.spec import SweepSpec
    from wadiloco.models.spec.schema import validate

    path = Path(job.file).resolve()
    sets = {k: v for k, v in job.sets.items() if k.split(".")[0] != "policy"}
    data = {
        "name": name,
        "regimes": [{"path": str(path), **r} for r in regimes],
        "policies": arms,
        "seeds": job.seeds,
        "overrides": sets,
        **({"horizon_s": job.horizon} if job.horizon else {}),
    }
    return build_plan(validate(SweepSpec, data, job.file), job.file, path.parent)


def grid_plan(job: Job):
    """Every load x (no_sync and each row), on every seed."""
    regimes = [{"name": job.regime(x), "overrides": {"workload.load": x}} for x in job.loads]
    arms = [{"name": "no_sync"}, *({"name": job.policy, "params": p, "label": row} for row, p in job.rows.items())]
    return _plan(job, "safe grid", regimes, arms)


def placement(job: Job) -> tuple[str, str, dict[str, Any]]:
    """(label, policy, params) of the placement the boundary cell compares its row with: workload-aware
    (wa_diloco) against the policy's, or fixed at the corridor's middle when the policy is wa_diloco."""
    if job.policy != "wa_diloco":
        return f"{PLACEMENT} (wa_diloco)", "wa_diloco", {}
    h = round(math.sqrt(job.sc.merge.h_min * job.sc.merge.h_max))
    return f"fixed placement (H={h})", "fixed", {"H": h}


def boundary_plan(job: Job, cell: dict[str, Any]):
    """The boundary cell, the cell with each control, and with each mitigation; no_sync and the cell's
    row in each, and the other placement in the cell itself. Also (controls, mitigations): each
    variant's (regime, policy label) in this plan."""
    base = {"workload.load": cell["load"]}
    regimes = [{"name": CELL, "overrides": base}]
    controls, mitigations = {}, {}
    for res in job.controls:
        name = f"unlimited {res}"
        regimes.append({"name": name, "overrides": {**base, "fleet.unlimited": [*job.sc.fleet.unlimited, res]}})
        controls[res] = (name, cell["row"])
    for name, fields in job.mitigations.items():
        regimes.append({"name": name, "overrides": {**base, **fields}})
        mitigations[name] = (name, cell["row"])
    label, alt, params = placement(job)
    arms = [{"name": "no_sync"}, {"name": job.policy, "params": job.rows[cell["row"]], "label": cell["row"]}]
    arms.append({"name": alt, "params": params, "label": label, "regimes": [CELL]})
    mitigations[label] = (CELL, label)
    return _plan(job, "safe boundary", regimes, arms), controls, mitigations


def _execute(plan, folder: Path, args):
    """Run the plan's runs not yet in `folder`'s store (experiments.sweep.execute_plan); its runs table."""
    from wadiloco.experiments.protocol import runs_table
    from wadiloco.experiments.store import STORE_NAME, Store
    from wadiloco.experiments.sweep import execute_plan

    backend = "dask" if args.scheduler else args.backend
    oc = execute_plan(
        plan,
        folder,
        workers=args.workers,
        backend=backend,
        scheduler=args.scheduler,
        resume=True,  # a folder of this command's own: its store continues (--resume) or is new
        progress=not args.no_progress,
    )
    store = Store(folder / STORE_NAME, readonly=True)
    try:
        rows = list(store.rows())
    finally:
        store.close()
    return runs_table(plan, rows), oc


def run_map(job: Job, folder: Path, args) -> dict[str, Any]:
    """Both sweeps and the analysis (experiments.region): the result `safe` prints and writes."""
    from wadiloco.experiments import region as R

    t0 = time.perf_counter()
    gplan = grid_plan(job)
    runs, oc1 = _execute(gplan, folder / "grid", args)
    loads = {job.regime(x): x for x in job.loads}
    grid = R.cells(runs, loads, list(job.rows), job.threshold)
    bounds = R.boundaries(grid, job.threshold)
    cell = R.boundary_cell(grid, bounds)
    bplan, controls, mitigations = boundary_plan(job, cell)
    bruns, oc2 = _execute(bplan, folder / "boundary", args)
    cell.update(R.excess(bruns, CELL, cell["row"], job.threshold))
    cell["merges_mean"] = float(
        grid.loc[(grid["load"] == cell["load"]) & (grid["row"] == cell["row"]), "merges_mean"].iloc[0]
    )
    ctl = R.effects(bruns, (CELL, cell["row"]), controls, job.threshold)
    mit = R.effects(bruns, (CELL, cell["row"]), mitigations, job.threshold)
    for t in (ctl, mit):
        t["verdict"] = [R.verdict(r, cell["sync_excess_pp"], job.threshold) for _, r in t.iterrows()]
    errors = int((runs["status"] != "ok").sum() + (bruns["status"] != "ok").sum())
    return {
        "grid": grid,
        "boundaries": bounds,
        "cell": cell,
        "controls": ctl,
        "mitigations": mit,
        "deciding": R.deciding(ctl, cell["sync_excess_pp"], job.threshold),
        "runs": {"grid": oc1.total, "boundary": oc2.total, "ran": oc1.ran + oc2.ran, "failed": errors},
        "backend": oc1.backend,
        "workers": oc1.workers,
        "wall_s": time.perf_counter() - t0,
    }


# ---- the command ------------------------------------------------------------------------------------


def cmd_safe(args) -> int:
    from wadiloco.experiments import safe_report as report
    from wadiloco.experiments.output import ResultDir, dumps

    if args.force and args.resume:
        raise InputError(CLI, "--force", "--force starts over and --resume continues: give one")
    if args.resume and not args.out:
        raise InputError(CLI, "--resume", "continues a safe in --out; give its folder")
    if args.scheduler:
        from wadiloco.experiments.sweep.backends import probe_scheduler

        probe_scheduler(args.scheduler)
    job = setup(args)
    out = ResultDir(args.out, "safe", args.force or args.resume) if args.out else None
    if out is None:
        with tempfile.TemporaryDirectory(prefix="wadiloco-safe-") as tmp:
            res = run_map(job, Path(tmp), args)
    else:
        res = _in_folder(out, job, args)
    result = report.result(job, res, _provenance(job, args))
    if out is not None:
        report.write(out, result, res)
    sys.stdout.write(dumps(result) + "\n" if args.json else report.text(result, out.path if out else None) + "\n")
    return 1 if res["runs"]["failed"] else 0


def _in_folder(out, job: Job, args) -> dict[str, Any]:
    """run_map with the runs kept in --out (runs/grid, runs/boundary: a stopped safe continues with
    --resume); --force removes an earlier safe's runs first. A safe that stops before any run is
    stored leaves nothing behind."""
    from wadiloco.experiments.sweep.folder import LOCK_NAME, STORE_FILES

    runs = out.path / "runs"
    if args.force:
        for d in (runs / "grid", runs / "boundary"):
            for name in (*STORE_FILES, LOCK_NAME):
                (d / name).unlink(missing_ok=True)
    out.open()
    try:
        return run_map(job, runs, args)
    except BaseException:
        kept = any((runs / d / STORE_FILES[0]).exists() for d in ("grid", "boundary"))
        if kept:
            sys.stderr.write(f"the runs so far are kept in {runs}; rerun the same command with --resume to continue\n")
        else:
            for d in (runs / "grid", runs / "boundary", runs):  # what execute_plan left empty
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
            out.discard()
        raise


def _provenance(job: Job, args) -> dict[str, Any]:
    from wadiloco.experiments import provenance

    return {
        **provenance.software(),
        "command": "safe",
        "scenario_file": job.file,
        "scenario_name": job.sc.name,
        "scenario_digest": job.sc.digest(),
        "overrides": job.sets,
        "policy": job.policy,
        "policy_params": job.params,
        "seeds": job.seeds,
        "grid": {"loads": job.loads, "rows": job.rows},
        "threshold_pp": job.threshold,
        "horizon_s": job.horizon or job.sc.horizon_s,
        "controls": job.controls,
        "mitigations": job.mitigations,
        "scenario": job.sc.model_dump(mode="json"),
    }
