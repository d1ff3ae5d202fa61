"""What produced an output: package version, git revision, and the exact run it records.

Every result a command writes carries this, so a folder found later says what made it: the
resolved scenario (every default filled in), the policy with its params, seed and draw, the
package version and, when the package runs from a git checkout, the revision (with `+dirty`
when the checkout has uncommitted changes). No clock time, so equal runs give equal files.
A sweep's folder holds the same record for its whole run set (`of_sweep`), plus one entry per
session that ran it (`session`), so a sweep resumed under another version says so.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

DIST = "wadiloco-sim"
GIT_TIMEOUT_S = 60


@functools.cache
def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(DIST)
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


@functools.cache
def git_revision() -> str | None:
    """The checkout's commit (`+dirty` if it has uncommitted changes), or None outside git."""
    root = Path(__file__).resolve().parents[1]
    # A generous timeout: `git status` on a loaded machine can take seconds, and a sweep's processes
    # that timed out differently would record different revisions (a report that differs by run).
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{rev}+dirty" if dirty else rev or None


def software() -> dict[str, Any]:
    from wadiloco.models.engine._fast import KIND  # (here, not at import: `wadiloco --pure` chooses it first)

    return {"version": version(), "git_revision": git_revision(), "serving_core": KIND}


def resolved_scenario(sc, r) -> dict[str, Any]:
    """A scenario and its run's spec (models.spec.run.RunSpec) as a plain mapping: the scenario with
    every default, its workload's params with theirs, and the policy that runs with its validated params."""
    data = sc.model_dump(mode="json")
    data["workload"] = r.workload.params.model_dump(mode="json")
    data["policy"] = {"name": r.policy_name, "params": r.params.model_dump(mode="json")}
    return data


def of_run(sc, r, seed: int, draw: int, sets: list[tuple[str, Any]] | None = None) -> dict[str, Any]:
    """Provenance of one run of scenario `sc` as resolved (`r`, its RunSpec)."""
    return {
        **software(),
        "scenario_file": sc.source,
        "overrides": {path: value for path, value in sets or []},
        "policy": r.policy_name,
        "policy_params": r.params.model_dump(mode="json"),
        "seed": seed,
        "draw": draw,
        "scenario": resolved_scenario(sc, r),
    }


def _sha256(path: str) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def session(resume: bool, completed_before: int) -> dict[str, Any]:
    """One session of a sweep: the software that ran it, and how many runs were stored before."""
    return {**software(), "resume": resume, "completed_before": completed_before}


def of_sweep(plan) -> dict[str, Any]:
    """Provenance of a sweep's run set (an experiments.sweep.Plan built from its file): the sha256
    of the sweep file and its scenario files (`sources`) and of every other input the runs read
    (`inputs`), each regime's resolved scenario (the sweep's and the regime's overrides applied,
    every default filled in; the policy is the sweep's, so it is left out there), each policy with
    its validated params, and the seeds."""
    from wadiloco.models.spec.load import check_policy
    from wadiloco.models.spec.resolve import resolve

    regimes, first = [], {}
    for reg in plan.regimes:
        data = resolved_scenario(reg.scenario, resolve(reg.scenario))
        data.pop("policy", None)
        regimes.append({"name": reg.name, "scenario_file": reg.path, "scenario_hash": reg.digest, "scenario": data})
    for a in plan.arms:
        reg = next(r for r in plan.regimes if a.runs_in(r.name))
        _, p = check_policy(reg.scenario, a.name, a.params, plan.file, f"policies ({a.label})")
        first[a.label] = p.model_dump(mode="json")
    return {
        **software(),
        "sweep_file": plan.file,
        "sources": {f: _sha256(f) for f in dict.fromkeys([plan.file, *(r.path for r in plan.regimes)])},
        "inputs": dict(plan.inputs),
        "plugins": list(plan.plugins),
        "seeds": list(plan.seeds),
        "regimes": regimes,
        "policies": [
            {
                "label": a.label,
                "name": a.name,
                "role": a.role,
                "draws": a.draws,
                "reference": a.reference,
                "regimes": list(a.regimes) if a.regimes is not None else None,
                "params": first[a.label],
            }
            for a in plan.arms
        ],
    }
