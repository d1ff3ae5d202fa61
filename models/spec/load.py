"""Loading a scenario: read the YAML and validate it, cheaply; resolving it for a run is models.spec.resolve.

`load_scenario`, `scenario_from_dict` and `with_overrides` give a validated `Scenario` (the schema,
models.spec.scenario, then `check_inputs`: the workload and policy against their registries, the
files it names read, the engine profile's model and co-tenant entry looked up but not fitted), what
code that edits scenarios (sweeps, capacity searches, the CLI) works with. models.spec.resolve turns
one into a `RunSpec` (models.spec.run), what a fleet is built from.

Validation errors are `InputError`s naming the file and the dotted field. The schema and the shared
validation helpers (models.spec.schema) are re-exported here, where older code imports them from.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from wadiloco.models.cotenant import check_timetable
from wadiloco.models.engine.latency import table_file, table_law
from wadiloco.models.engine.profiles import check_refs, resolve_profile
from wadiloco.models.errors import InputError
from wadiloco.models.policies import parse_policy
from wadiloco.models.results.blocks import RESULT_BLOCKS
from wadiloco.models.spec.buildcheck import check_buildable
from wadiloco.models.spec.files import named_by
from wadiloco.models.spec.scenario import (
    PLUGIN_BLOCKS,
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
from wadiloco.models.workload.kinds import WORKLOADS, parse_workload

_check_finite = check_finite  # the name experiments.sweep imports

__all__ = [
    "EngineConfig",
    "FleetConfig",
    "InterferenceConfig",
    "MergeConfig",
    "MonitorConfig",
    "PolicyConfig",
    "SLOConfig",
    "Scenario",
    "Strict",
    "TrainingConfig",
    "check_finite",
    "checked",
    "check_inputs",
    "check_policy",
    "check_policy_in",
    "format_validation_error",
    "load_scenario",
    "policy_choice",
    "read_yaml",
    "scenario_from_dict",
    "validate",
    "with_overrides",
]


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
    return check_policy_in(name, params, sc.merge.h_min, sc.merge.h_max, sc.base_dir, file, where)


def check_policy_in(name: str, params: dict | None, h_min: int, h_max: int, base_dir: str, file: object, where: str):
    """`check_policy` against a corridor and the folder the params' files are relative to."""
    cls, p = parse_policy(name, params, file, where)
    with named_by(file, f"{where}.params"):  # a file the params name: its own errors name it and its line
        problem = cls.check_corridor(p, h_min, h_max) or cls.check_inputs(p, base_dir)
    if problem:
        raise InputError(file, f"{where}.params", problem)
    return cls, p


def check_inputs(sc: Scenario, file: object) -> None:
    """The checks against the registries and the files a scenario names, cheap (nothing is fitted or
    built): the workload's params (a trace is read, once per process and file), the engine profile's
    file, model and co-tenant entry, the policy's params against the corridor, the timetables, and
    everything else a fleet's build would fail at (models.spec.buildcheck). The
    parsed workload and policy are kept for its resolution while the scenario lives (`checked`)."""
    workload = parse_workload(sc.workload, file, sc.base_dir)
    if sc.engine.latency == "table":  # (read once per process and file version: resolution asks again)
        table_law(table_file(sc.engine.latency_table, sc.base_dir, file))
    path = resolve_profile(sc.engine.profile, sc.base_dir, file) if sc.engine.profile is not None else None
    if path is not None:
        check_refs(path, sc.engine.model, None, file)
    policy = check_policy(sc, *policy_choice(sc, None, None), file, "policy")
    c = sc.cotenant
    if c is not None:
        check_timetable(c.timetable, sc.horizon_s, sc.base_dir, file, "cotenant.timetable")
        if c.weight is None and path is None:
            raise InputError(
                file, "engine.profile", "cotenant.profile_entry needs an engine profile: set engine.profile"
            )
        if c.weight is None:
            check_refs(path, None, c.profile_entry, file)
    for name, block in plugin_blocks(sc, file):
        RESULT_BLOCKS[name].check(block, sc.horizon_s, sc.base_dir, file)
    check_buildable(sc, WORKLOADS[workload.kind].clients is not None, file)
    _CHECKED[id(sc)] = (workload, policy)
    weakref.finalize(sc, _CHECKED.pop, id(sc), None)


def plugin_blocks(sc: Scenario, file: object) -> list[tuple[str, Any]]:
    """The scenario's blocks a plug-in resolves (scenario.PLUGIN_BLOCKS) that it sets, as (name, block),
    in that order; one with no plug-in registered for it is an input error."""
    out = []
    for name in PLUGIN_BLOCKS:
        block = getattr(sc, name)
        if block is None:
            continue
        if name not in RESULT_BLOCKS:
            raise InputError(file, name, f"no plug-in resolves this block (registered: {RESULT_BLOCKS.known()})")
        out.append((name, block))
    return out


# What validation parsed of each live scenario's free-form blocks, by the scenario's identity: the
# workload's params (a trace loaded) and its own policy (class, params). models.spec.resolve takes
# them from here (`checked`), so a run parses neither twice; a copy (or a scenario unpickled in a
# sweep worker) is another object and is parsed again.
_CHECKED: dict[int, tuple] = {}


def checked(sc: Scenario) -> tuple:
    """(workload params, (policy class, params)) as validation parsed them, or (None, None)."""
    return _CHECKED.get(id(sc), (None, None))


def scenario_from_dict(data: Any, file: object = "<scenario>", base_dir: str | Path = ".") -> Scenario:
    """Parsed YAML to a validated scenario (the schema, then `check_inputs`); relative paths resolve
    from `base_dir`. Resolving it for a run is models.spec.resolve's."""
    if not isinstance(data, dict):
        raise InputError(file, "", f"expected a mapping of fields at the top level (got {type(data).__name__})")
    check_finite(data, file)
    sc = validate(Scenario, data, file)
    sc.base_dir = str(Path(base_dir).resolve())
    sc.source = str(file)
    check_inputs(sc, file)
    return sc


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    return scenario_from_dict(read_yaml(p), p, p.parent)


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
