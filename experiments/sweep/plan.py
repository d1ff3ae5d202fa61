"""The run plan, the one type a sweep is described by: regimes, arms (policy configurations as run)
and the tasks they expand into.

Labels default to the policy name; when one name appears twice the label is built from the params
(``fixed[H=256]``). A policy whose params take a ``reference`` (``matched_random``, ``overlap_oracle``) lists the
*labels* of the policies whose merge budget it inherits in ``references`` and gets one arm per
reference, labelled ``<label or name>[<reference label>]`` (or just ``label`` when it has a label and
one reference), with ``draws`` runs per seed. ``matched_random`` arms are controls (``role:
control``); others are evaluated policies (``role: policy``). Each evaluated policy is compared with
every control that spends the same merge budget: ``wa_diloco`` and ``overlap_oracle[wa_diloco]``
both with ``matched_random[wa_diloco]``.
A policy entry may name the ``regimes`` it runs in (e.g. ``fixed`` with ``H: 512`` only where 512
fits the corridor); a control runs where both it and its reference run.
The scenario's own ``policy`` block is ignored (replaced by no_sync before overrides apply).
Overrides apply in this order: the scenario file, the sweep's ``horizon_s``/``overrides``, then the
regime's own ``overrides`` (the most specific wins).

The store keeps `Plan.to_dict()`; `Plan.from_dict()` reads it back for the protocol, the report and
the export, so they need nothing but the output folder. A plan read back has no scenario objects:
it describes runs, it cannot start them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from wadiloco.experiments.store import DAMAGED
from wadiloco.experiments.sweep.plugins import load_plugins, plugin_files, plugin_modules
from wadiloco.experiments.sweep.spec import BootstrapSpec, Entry, GateSpec, PolicySpec, SweepSpec, read_spec
from wadiloco.models.errors import InputError
from wadiloco.models.policies import POLICIES
from wadiloco.models.policies.registry import unknown_policy
from wadiloco.models.spec.files import named_by
from wadiloco.models.spec.limits import check_count, check_run
from wadiloco.models.spec.load import Scenario, check_policy, load_scenario, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.spec.schema import input_problem, read_input

BASELINE = "no_sync"


def stable_hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class Regime:
    name: str
    path: str
    digest: str  # Scenario.digest(): the scenario_hash of every run in this regime
    horizon_s: float | None = None
    workload: str | None = None
    scenario: Scenario | None = field(default=None, repr=False, compare=False)  # None when read back
    load: float | None = None  # workload.load, where the workload states one (a sidecar's capacity = 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "scenario_hash": self.digest,
            "horizon_s": self.horizon_s,
            "workload": self.workload,
            "load": self.load,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Regime:
        return cls(
            d["name"], d.get("path", ""), d["scenario_hash"], d.get("horizon_s"), d.get("workload"), load=d.get("load")
        )


@dataclass(frozen=True)
class Arm:
    """One policy configuration as run: a sweep entry, or one reference of a matched control."""

    label: str
    name: str
    params: dict[str, Any]  # the params the run gets (matched controls: incl. reference, reference_params)
    params_hash: str
    draws: int
    role: str  # "baseline" (no_sync), "policy" (evaluated), or "control" (a randomised comparator)
    reference: str | None = None  # label of the arm whose run sets this arm's merge budget
    regimes: tuple[str, ...] | None = None  # None: every regime

    def runs_in(self, regime: str) -> bool:
        return self.regimes is None or regime in self.regimes

    @property
    def budget(self) -> str:
        """Whose merge budget this arm spends: its reference's, or its own."""
        return self.reference or self.label

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "name": self.name,
            "params": self.params,
            "params_hash": self.params_hash,
            "draws": self.draws,
            "role": self.role,
            "reference": self.reference,
            "regimes": list(self.regimes) if self.regimes is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Arm:
        regimes = d.get("regimes")
        return cls(
            d["label"],
            d["name"],
            dict(d.get("params") or {}),
            d["params_hash"],
            int(d["draws"]),
            d["role"],
            d.get("reference"),
            tuple(regimes) if regimes else None,
        )


@dataclass(frozen=True)
class Task:
    regime: str
    arm: str
    seed: int
    draw: int
    key: tuple  # (scenario_hash, policy_label, params_hash, seed, draw): the store's primary key
    ref_key: tuple | None = None  # the reference run whose merge budget this run needs (must succeed)
    base_key: tuple | None = None  # the no_sync run on the same (regime, seed) (needed finished, ok or not)


@dataclass
class Plan:
    name: str
    description: str
    file: str
    regimes: list[Regime]
    arms: list[Arm]
    seeds: list[int]
    timeline_seed: int  # whose timelines are stored for the timeline figure
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    gate: GateSpec = field(default_factory=GateSpec)
    plugins: tuple[str, ...] = ()  # $WADILOCO_PLUGINS as the plan was built (for the workers)
    inputs: dict[str, str] = field(default_factory=dict)  # path -> sha256 of every file the runs read

    def arm(self, label: str) -> Arm:
        return next(a for a in self.arms if a.label == label)

    def regime(self, name: str) -> Regime:
        return next(r for r in self.regimes if r.name == name)

    @property
    def baseline(self) -> Arm:
        return next(a for a in self.arms if a.role == "baseline")

    def key(self, regime: Regime, arm: Arm, seed: int, draw: int) -> tuple:
        return (regime.digest, arm.label, arm.params_hash, int(seed), int(draw))

    def expected_runs(self) -> int:
        return sum(a.draws * len(self.seeds) for r in self.regimes for a in self.arms if a.runs_in(r.name))

    def tasks(self) -> list[Task]:
        """Every run, in the deterministic order of the outputs: regime, policy, seed, draw."""
        out = []
        base = self.baseline
        for r in self.regimes:
            for a in self.arms:
                if not a.runs_in(r.name):
                    continue
                ref = self.arm(a.reference) if a.reference else None
                for s in self.seeds:
                    ref_key = self.key(r, ref, s, 0) if ref else None
                    base_key = None if a is base else self.key(r, base, s, 0)
                    out += [
                        Task(r.name, a.label, s, d, self.key(r, a, s, d), ref_key, base_key) for d in range(a.draws)
                    ]
        return out

    def identity(self) -> str:
        """What makes two sweeps the same run set (analysis settings may change on resume)."""
        return stable_hash(
            {
                "regimes": [(r.name, r.digest) for r in self.regimes],
                "arms": [(a.label, a.name, a.params_hash, a.draws, a.reference, a.regimes) for a in self.arms],
                "seeds": self.seeds,
                "timeline_seed": self.timeline_seed,
                # contents, not paths: an edited trace is another sweep
                **({"inputs": sorted(self.inputs.items())} if self.inputs else {}),
            },
            32,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON kept in the store: enough to analyse and re-render without the YAML."""
        return {
            "name": self.name,
            "description": self.description,
            "file": self.file,
            "identity": self.identity(),
            "regimes": [r.to_dict() for r in self.regimes],
            "arms": [a.to_dict() for a in self.arms],
            "seeds": self.seeds,
            "timeline_seed": self.timeline_seed,
            "bootstrap": self.bootstrap.model_dump(mode="json"),
            "gate": self.gate.model_dump(mode="json"),
            "inputs": self.inputs,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        seeds = [int(s) for s in d["seeds"]]
        return cls(
            name=d.get("name", "sweep"),
            description=d.get("description", ""),
            file=d.get("file", ""),
            regimes=[Regime.from_dict(r) for r in d["regimes"]],
            arms=[Arm.from_dict(a) for a in d["arms"]],
            seeds=seeds,
            timeline_seed=int(d.get("timeline_seed", seeds[0])),
            bootstrap=BootstrapSpec.model_validate(d.get("bootstrap") or {}),
            gate=GateSpec.model_validate(d.get("gate") or {}),
            inputs=dict(d.get("inputs") or {}),
        )

    @classmethod
    def from_store(cls, store) -> Plan:
        """The plan a store (experiments.store.Store) keeps; a damaged one is an input error naming it."""
        try:
            plan = cls.from_dict(store.plan())
            if not plan.seeds or not plan.regimes or not plan.arms:
                raise ValueError("no seeds, regimes or policies")
            return plan
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ValidationError) as e:
            why = f"missing {e}" if isinstance(e, KeyError) else type(e).__name__
            raise InputError(
                store.path, "meta.plan", f"its sweep description is malformed ({why}); {DAMAGED}"
            ) from None


# ---- building a plan from a sweep file ---------------------------------------------------------


def load_sweep(path: str | Path) -> Plan:
    p = Path(path)
    return build_plan(read_spec(p), p, p.parent)


def build_plan(spec: SweepSpec, file: str | Path, base_dir: str | Path) -> Plan:
    """Validate the sweep against its scenarios and the policy registry, and expand it."""
    file = str(file)
    plugins = plugin_modules()
    load_plugins(plugins)
    entries = [e for i, r in enumerate(spec.regimes) for e in r.expand(i)]
    check_count("runs", len(entries) * len(spec.seeds), file, "regimes", "runs of no_sync alone (regimes x seeds)")
    regimes: list[Regime] = []
    scenarios: dict[Path, Scenario] = {}  # each file is read once, however many regimes start from it
    for e in entries:
        reg = _regime(spec, e, file, Path(base_dir), scenarios)
        if any(x.name == reg.name for x in regimes):
            where = f"regimes.{e.index}." + ("product" if e.from_product else "name")
            raise InputError(file, where, f"two regimes are named {reg.name!r}; give each a distinct `name`")
        regimes.append(reg)
    groups = _groups(spec, entries, regimes, file)
    arms = _arms(spec, file, regimes, groups)
    _check_size(spec, arms, regimes, file)
    return Plan(
        name=spec.name,
        description=spec.description,
        file=file,
        regimes=regimes,
        arms=arms,
        seeds=list(spec.seeds),
        timeline_seed=spec.timeline_seed if spec.timeline_seed is not None else spec.seeds[0],
        bootstrap=spec.bootstrap,
        gate=spec.gate,
        plugins=plugins,
        inputs=input_digests([r.scenario for r in regimes], plugins, [a.params for a in arms]),
    )


def _groups(spec: SweepSpec, entries: list[Entry], regimes: list[Regime], file: str) -> dict[str, list[str]]:
    """Each `regimes[].group` and the names of its regimes; a group may not share a regime's name."""
    names = {r.name for r in regimes}
    out: dict[str, list[str]] = {}
    for e, reg in zip(entries, regimes):
        if e.group is None:
            continue
        if e.group in names:
            raise InputError(file, f"regimes.{e.index}.group", f"{e.group!r} is a regime's name too; rename the group")
        out.setdefault(e.group, []).append(reg.name)
    return out


def _check_size(spec: SweepSpec, arms: list[Arm], regimes: list[Regime], file: str) -> None:
    """Refuse a plan with more runs than $WADILOCO_MAX_RUNS before any task is listed."""
    n = sum(a.draws * len(spec.seeds) for r in regimes for a in arms if a.runs_in(r.name))
    widest = max(range(len(spec.policies)), key=lambda i: spec.policies[i].draws)
    draws = f"policies.{widest}.draws"
    field, other = (draws, "seeds") if spec.policies[widest].draws >= len(spec.seeds) else ("seeds", draws)
    if spec.policies[widest].draws == 1:
        other = ""
    check_count("runs", n, file, field, "runs in this sweep (regimes x policies x seeds x draws)", other)


def input_digests(scenarios: list[Scenario], plugins: tuple[str, ...] = (), params: list[dict] = ()) -> dict[str, str]:
    """sha256 of every file the runs read besides the scenario (whose parsed content is its digest):
    any string naming an existing file in a scenario or in a policy's params (a trace, a profile, a
    windows file, a replay schedule; relative to the scenario, as the runs read them), the plugins'
    files (a .py path, or a module's source files) and the packaged calibration. Part of the
    sweep's identity, so --resume after editing one starts no mixture."""
    from importlib import resources

    from wadiloco.models.engine.latency import CALIBRATION_FILE

    files = {str(f.resolve()) for f in plugin_files(plugins)}
    for sc in scenarios:
        strings = [*_strings(sc.model_dump(mode="json")), *(x for p in params for x in _strings(p))]
        for s in strings:
            p = Path(s).expanduser() if 0 < len(s) < 4096 and "\n" not in s and "\0" not in s else None
            p = p if p is None or p.is_absolute() else Path(sc.base_dir) / p
            if p is not None and p.is_file():
                files.add(str(p.resolve()))
            elif p is not None and re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", s) and (q := _packaged_profile(s)):
                files.add(str(q))  # an engine profile named, not given by path
    out = {f: hashlib.sha256(read_input(f)).hexdigest() for f in sorted(files)}
    cal = resources.files("wadiloco.models.data").joinpath(CALIBRATION_FILE).read_bytes()
    out[f"wadiloco.models.data/{CALIBRATION_FILE}"] = hashlib.sha256(cal).hexdigest()
    return out


def _packaged_profile(name: str) -> Path | None:
    from importlib import resources

    from wadiloco.models.engine.profiles import PACKAGED

    q = resources.files("wadiloco.models.data").joinpath(PACKAGED, f"{name}.yaml")
    return Path(str(q)) if q.is_file() else None


def _strings(obj: Any):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def _regime(spec: SweepSpec, e: Entry, file: str, base: Path, scenarios: dict[Path, Scenario]) -> Regime:
    """A regime: its scenario + the sweep-wide overrides + the regime's own overrides."""
    p = Path(e.path)
    p = p if p.is_absolute() else base / p
    if p not in scenarios:
        problem = input_problem(p, "scenario file")
        if problem:
            raise InputError(file, e.path_at, f"{e.path}: {problem} (looked for {p})")
        scenarios[p] = load_scenario(p)
    sc = scenarios[p]
    # The scenario's own `policy` is not used by a sweep (the sweep names its policies), so it
    # is neutralised first: it cannot clash with an overridden corridor, and it does not enter
    # the scenario hash.
    merged: dict[str, Any] = {"policy.name": BASELINE, "policy.params": {}}
    origin: dict[str, str] = {}  # dotted field -> where the sweep file set it
    for k, v in spec.overrides.items():
        merged[k], origin[k] = v, f"overrides.{k}"
    if spec.horizon_s is not None:
        merged["horizon_s"], origin["horizon_s"] = spec.horizon_s, "horizon_s"
    merged.update(e.overrides)
    origin.update(e.origin)
    try:
        sc = with_overrides(sc, merged)
    except InputError as err:
        # a field-level problem names its override; a scenario-wide one (e.g. h_min > h_max)
        # names the most specific override block
        where = origin.get(err.where) or next(
            (w for k, w in origin.items() if err.where and (k.startswith(err.where + ".") or err.where.startswith(k))),
            f"regimes.{e.index}.overrides" if e.overrides else "overrides",
        )
        raise InputError(
            file, where, f"does not apply to {p}: {err.where + ': ' if err.where else ''}{err.message}"
        ) from None
    name = e.name or sc.name
    with named_by(file, f"regimes.{e.index} ({name})"):
        run = resolve(sc)  # what every run's resolution would refuse (an engine profile's fit), refused once here
    check_run(run, file=file, prefix=f"regimes.{e.index} ({name}): ")  # before any output exists
    return Regime(name, str(p), sc.digest(), sc.horizon_s, sc.workload.get("kind"), sc, _load_of(sc))


def _load_of(sc: Scenario) -> float | None:
    """The workload's load (a fraction of a sidecar's capacity), if it states one."""
    load = sc.workload.get("load")
    return float(load) if isinstance(load, int | float) and not isinstance(load, bool) else None


def _arms(spec: SweepSpec, file: str, regimes: list[Regime], groups: dict[str, list[str]]) -> list[Arm]:
    """The arms in the YAML's order; a control's arms follow its references' order."""
    counts = Counter(ps.name for ps in spec.policies)
    policies = [_ungroup(i, ps, groups, regimes, file) for i, ps in enumerate(spec.policies)]
    entries = [(i, ps, _check_entry(i, ps, counts, regimes, file)) for i, ps in enumerate(policies)]
    plain: dict[str, PolicySpec] = {}
    for i, ps, label in entries:
        if not ps.references:
            if label in plain:
                raise InputError(file, f"policies.{i}.label", f"label {label!r} is used twice; labels must be distinct")
            plain[label] = ps
    names = [r.name for r in regimes]
    arms: list[Arm] = []
    for i, ps, label in entries:
        if not ps.references:
            role = "baseline" if ps.name == BASELINE else "policy"
            params_hash = stable_hash([ps.name, ps.params])
            arms.append(
                Arm(
                    label,
                    ps.name,
                    dict(ps.params),
                    params_hash,
                    ps.draws,
                    role,
                    None,
                    _regime_set(ps.regimes, None, names),
                )
            )
        else:
            arms += _control_arms(i, ps, label, plain, regimes, {a.label for a in arms}, file)
    base = [a for a in arms if a.role == "baseline"]
    if not base:
        raise InputError(file, "policies", "the protocol needs the load-match baseline: add `- {name: no_sync}`")
    if base[0].regimes is not None:
        raise InputError(file, "policies", "no_sync is the baseline of every regime; it takes no `regimes`")
    if len(base) > 1:
        raise InputError(file, "policies", "list no_sync once")
    return arms


def _ungroup(i: int, ps: PolicySpec, groups: dict[str, list[str]], regimes: list[Regime], file: str) -> PolicySpec:
    """The entry with the groups its `regimes` names replaced by their regimes (each once)."""
    if ps.regimes is None:
        return ps
    names = {r.name for r in regimes}
    out: list[str] = []
    for j, rn in enumerate(ps.regimes):
        if rn not in names and rn not in groups:
            known = ", ".join(list(groups) + [r.name for r in regimes][:20]) + (", ..." if len(regimes) > 20 else "")
            where = f"policies.{i}.regimes.{j}"
            raise InputError(file, where, f"no regime or group named {rn!r} in this sweep ({known})")
        out += [n for n in groups.get(rn, [rn]) if n not in out]
    return ps.model_copy(update={"regimes": out})


def _check_entry(i: int, ps: PolicySpec, counts: Counter, regimes: list[Regime], file: str) -> str:
    """Check one policy entry against the registry and the regimes; its label."""
    if ps.name not in POLICIES:
        raise InputError(file, f"policies.{i}.name", unknown_policy(ps.name))
    takes_ref = POLICIES[ps.name].takes_reference
    if takes_ref and "reference" in ps.params:
        raise InputError(
            file,
            f"policies.{i}.params.reference",
            "name the followed policies by label in `references: [...]`, not in params",
        )
    if takes_ref and not ps.references:
        raise InputError(
            file,
            f"policies.{i}.references",
            f"{ps.name} is a matched control and needs `references: [policy labels]` "
            f"naming the policies whose merge counts it inherits",
        )
    if not takes_ref and ps.references:
        raise InputError(
            file, f"policies.{i}.references", f"policy {ps.name!r} does not follow a reference; remove `references`"
        )
    if ps.role == "control" and not takes_ref:
        raise InputError(
            file, f"policies.{i}.role", f"a control follows a reference's merge budget; {ps.name!r} takes no reference"
        )
    if ps.name == BASELINE and ps.draws != 1:
        raise InputError(file, f"policies.{i}.draws", "no_sync is deterministic; it takes no draws")
    if not takes_ref:
        _check_in_regimes(_only(regimes, ps.regimes), ps.name, ps.params, file, f"policies.{i}")
    return ps.label or (ps.name if counts[ps.name] == 1 or takes_ref else _auto_label(ps))


def _control_arms(
    i: int, ps: PolicySpec, label: str, plain: dict[str, PolicySpec], regimes: list[Regime], taken: set, file: str
) -> list[Arm]:
    """One arm per reference of a policy that follows references (a matched control or an oracle)."""
    if len(set(ps.references)) != len(ps.references):
        raise InputError(file, f"policies.{i}.references", "a reference is listed twice")
    names = [r.name for r in regimes]
    out: list[Arm] = []
    for j, ref in enumerate(ps.references):
        where = f"policies.{i}.references.{j}"
        if ref not in plain:
            raise InputError(file, where, f"no policy labelled {ref!r} in this sweep (labels: {', '.join(plain)})")
        rps = plain[ref]
        if rps.name == BASELINE:
            raise InputError(file, where, "no_sync never merges; a matched control cannot follow it")
        if rps.draws != 1:
            raise InputError(
                file, where, f"{ref!r} has draws > 1; a matched control follows a policy with one run per seed"
            )
        params = {**ps.params, "reference": rps.name, "reference_params": dict(rps.params)}
        where_ok = _regime_set(ps.regimes, rps.regimes, names)
        if where_ok == ():
            raise InputError(file, f"policies.{i}.regimes", f"runs in no regime where its reference {ref!r} runs")
        _check_in_regimes(_only(regimes, where_ok), ps.name, params, file, f"policies.{i}")
        alabel = ps.label if ps.label and len(ps.references) == 1 else f"{label}[{ref}]"
        if alabel in plain or alabel in taken or any(a.label == alabel for a in out):
            raise InputError(file, f"policies.{i}.label", f"label {alabel!r} is used twice")
        role = ps.role or ("control" if POLICIES[ps.name].control else "policy")
        out.append(Arm(alabel, ps.name, params, stable_hash([ps.name, params]), ps.draws, role, ref, where_ok))
    return out


def _auto_label(spec: PolicySpec) -> str:
    if not spec.params:
        return spec.name
    inner = ",".join(
        f"{k}={json.dumps(v, sort_keys=True) if not isinstance(v, str) else v}" for k, v in sorted(spec.params.items())
    )
    return f"{spec.name}[{inner}]"


def _only(regimes: list[Regime], names) -> list[Regime]:
    return regimes if names is None else [r for r in regimes if r.name in names]


def _regime_set(own, ref, names: list[str]) -> tuple[str, ...] | None:
    """The regimes an arm runs in (None: all), in the sweep's order."""
    if own is None and ref is None:
        return None
    keep = set(names if own is None else own) & set(names if ref is None else ref)
    return tuple(n for n in names if n in keep)


def _check_in_regimes(regimes: list[Regime], name: str, params: dict, file: str, where: str) -> None:
    """Validate a policy's params, and that they fit every regime's merge corridor."""
    for reg in regimes:
        try:
            check_policy(reg.scenario, name, params, file, where)
        except InputError as e:
            if len(regimes) > 1 and e.where.endswith(".params") and "corridor" in e.message:
                raise InputError(e.file, e.where, f"{e.message} in regime {reg.name!r}") from None
            raise
