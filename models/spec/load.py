"""Loading a scenario: read the YAML, validate it, and resolve it against the registries once.

`load` gives a `Resolved`: the validated `Scenario` (schema: models.spec.scenario), its workload's
parsed params (a trace loaded: models.workload.kinds) and the run's policy class with validated params
(models.policies), and its GPU co-tenant and testbed labels as plans (models.cotenant: weights
and exact timetables, files read). The fleet is built from a `Resolved` as it is and parses nothing again.
`load_scenario`, `scenario_from_dict` and `with_overrides` check just as deeply but return the bare
`Scenario`, for code that edits scenarios (sweeps, capacity searches); `resolve` turns one into a
`Resolved` (a trace is read once per process and file: models.workload.traces.load_trace_cached).

Validation errors are `InputError`s naming the file and the dotted field. The schema and the shared
validation helpers (models.spec.schema) are re-exported here, where older code imports them from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from wadiloco.models.cotenant import CotenantPlan, LabelPlan, cotenant_plan, label_plan
from wadiloco.models.engine.profiles import check_refs, resolve_profile
from wadiloco.models.errors import InputError
from wadiloco.models.policies import Params, Policy, parse_policy
from wadiloco.models.spec.scenario import (
    EngineConfig,
    FleetConfig,
    InterferenceConfig,
    MergeConfig,
    MonitorConfig,
    PolicyConfig,
    Scenario,
    SLOConfig,
    TrainingConfig,
)
from wadiloco.models.spec.schema import Strict, check_finite, format_validation_error, read_yaml, validate
from wadiloco.models.workload.kinds import parse_workload

_check_finite = check_finite  # the name experiments.sweep imports

__all__ = [
    "EngineConfig",
    "FleetConfig",
    "InterferenceConfig",
    "MergeConfig",
    "MonitorConfig",
    "PolicyConfig",
    "Resolved",
    "SLOConfig",
    "Scenario",
    "Strict",
    "TrainingConfig",
    "check_finite",
    "check_policy",
    "format_validation_error",
    "from_dict",
    "load",
    "load_scenario",
    "policy_choice",
    "read_yaml",
    "resolve",
    "scenario_from_dict",
    "validate",
    "with_overrides",
]


@dataclass(frozen=True)
class Resolved:
    """A scenario checked against every registry, with what the checks produced: what a fleet is
    built from (sim.fleet.Fleet), so nothing downstream validates or reads a file again."""

    scenario: Scenario
    workload: BaseModel  # the workload kind's params (models.workload.kinds); a trace is loaded
    policy: type[Policy]  # the policy this run uses (not necessarily the scenario's own)
    params: Params  # its validated params, checked against the merge corridor
    cotenant: CotenantPlan | None = None  # `cotenant:` resolved (sim.cotenant runs it)
    labels: LabelPlan | None = None  # `testbed_labels:` resolved (added to the request table)

    @property
    def policy_name(self) -> str:
        return self.policy.name

    def with_policy(
        self, name: str | None, params: dict | None, file: object = None, where: str = "policy"
    ) -> Resolved:
        """The same scenario run with another policy (`policy_choice` picks its params)."""
        sc = self.scenario
        cls, p = check_policy(sc, *policy_choice(sc, name, params), sc.source if file is None else file, where)
        return replace(self, policy=cls, params=p)


def policy_choice(sc: Scenario, name: str | None, params: dict | None) -> tuple[str, dict]:
    """The policy a run uses, by name and raw params: the scenario's own unless `name` is given;
    a policy named without params gets the scenario's params if it is the scenario's policy, else
    its defaults."""
    name = name or sc.policy.name
    if params is None:
        params = sc.policy.params if name == sc.policy.name else {}
    return name, params


def check_policy(sc: Scenario, name: str, params: dict | None, file: object, where: str):
    """Validate a policy's params, and that they fit the scenario's merge corridor: (class, params)."""
    cls, p = parse_policy(name, params, file, where)
    problem = cls.check_corridor(p, sc.merge.h_min, sc.merge.h_max) or cls.check_inputs(p, sc.base_dir)
    if problem:
        raise InputError(file, f"{where}.params", problem)
    return cls, p


def resolve(
    sc: Scenario | Resolved, policy: str | None = None, params: dict | None = None, *, file=None, where="policy"
) -> Resolved:
    """`sc` ready to run with `policy` (default: its own; see `policy_choice`). A `Resolved` comes
    back as it is when no policy is named, else with only the policy re-checked."""
    if isinstance(sc, Resolved):
        return sc if policy is None and params is None else sc.with_policy(policy, params, file, where)
    file = sc.source if file is None else file
    workload = parse_workload(sc.workload, file, sc.base_dir)
    if sc.engine.profile is not None:  # the file and model now; the fit when a run needs it
        path = resolve_profile(sc.engine.profile, sc.base_dir, file)
        check_refs(path, sc.engine.model, None, file)
    cls, p = check_policy(sc, *policy_choice(sc, policy, params), file, where)
    return Resolved(sc, workload, cls, p, cotenant_plan(sc, file), label_plan(sc, file))


def from_dict(data: Any, file: object = "<scenario>", base_dir: str | Path = ".") -> Resolved:
    """Parsed YAML to a resolved scenario; relative trace paths resolve from `base_dir`."""
    if not isinstance(data, dict):
        raise InputError(file, "", f"expected a mapping of fields at the top level (got {type(data).__name__})")
    check_finite(data, file)
    sc = validate(Scenario, data, file)
    sc.base_dir = str(Path(base_dir).resolve())
    sc.source = str(file)
    return resolve(sc, file=file)


def load(path: str | Path) -> Resolved:
    p = Path(path)
    return from_dict(read_yaml(p), p, p.parent)


def scenario_from_dict(data: Any, file: object = "<scenario>", base_dir: str | Path = ".") -> Scenario:
    return from_dict(data, file, base_dir).scenario


def load_scenario(path: str | Path) -> Scenario:
    return load(path).scenario


def with_overrides(sc: Scenario, overrides: dict[str, Any]) -> Scenario:
    """A copy with dotted-path fields replaced (e.g. {'fleet.interisland_gbps': 10}), re-validated."""
    data = sc.model_dump(mode="json")
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            if not isinstance(node, dict) or part not in node:
                raise InputError(sc.source, dotted, "no such field")
            node = node[part]
        # The workload's and the policy's params are free-form here (their own models check them
        # on re-validation), so a key they do not have yet may be added; elsewhere it must exist.
        open_ended = node is data["workload"] or node is data["policy"]["params"]
        if not isinstance(node, dict) or (parts[-1] not in node and not open_ended):
            raise InputError(sc.source, dotted, "no such field")
        node[parts[-1]] = value
    return scenario_from_dict(data, sc.source, sc.base_dir)
