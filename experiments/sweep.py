"""Sweep files: regimes x policies x seeds, validated like scenarios, expanded into a run plan.

A sweep YAML names

    name: smoke                       # optional, for the report
    regimes:                          # scenario files, relative to this YAML
      - ../scenarios/normal.yaml
      - {path: ../scenarios/bursty.yaml, name: bursty_small, overrides: {fleet.hosts_per_island: 1}}
    horizon_s: 300                    # optional: every regime's horizon
    overrides: {drain_s: 60}          # optional: dotted scenario fields for every regime
    policies:
      - {name: no_sync}               # required: the load-match baseline
      - {name: fixed, params: {H: 256}, label: fixed_H256}
      - {name: fixed, params: {H: 512}, regimes: [normal]}   # only where 512 fits the corridor
      - {name: matched_random, references: [fixed_H256], draws: 3}
    seeds: 3                          # a count (0..N-1) or a list of seeds
    bootstrap: {n_resamples: 9999, confidence: 0.95, method: BCa, seed: 0}
    gate: {alpha: 0.05, min_p95_ratio: 1.05, transfer: matched, envelope: [2.5, 97.5]}
    timeline_seed: 0                  # whose timelines are stored for the timeline figure

Labels default to the policy name; when one name appears twice the label is built from the params
(``fixed[H=256]``). A policy whose params take a ``reference`` (``matched_random``, ``offline_calibrated``) lists the
*labels* of the policies whose merge budget it inherits in ``references`` and gets one arm per
reference, labelled ``<label or name>[<reference label>]`` (or just ``label`` when it has a label and
one reference), with ``draws`` runs per seed. ``matched_random`` arms are controls (``role:
control``); others are evaluated policies (``role: policy``). Each evaluated policy is compared with
every control that spends the same merge budget: ``wa_diloco`` and ``offline_calibrated[wa_diloco]``
both with ``matched_random[wa_diloco]``.
A policy entry may name the ``regimes`` it runs in (e.g. ``fixed`` with ``H: 512`` only where 512
fits the corridor); a control runs where both it and its reference run.
The scenario's own ``policy`` block is ignored (replaced by no_sync before overrides apply).
Overrides apply in this order: the scenario file, the sweep's ``horizon_s``/``overrides``, then the
regime's own ``overrides`` (the most specific wins).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from wadiloco.models.config import Scenario, Strict, _check_finite, load_scenario, read_yaml, validate, with_overrides
from wadiloco.models.errors import InputError

BASELINE = "no_sync"
PLUGINS_ENV = "WADILOCO_PLUGINS"


# ---- schema ----------------------------------------------------------------------------------


class RegimeSpec(Strict):
    path: str = Field(min_length=1, description="scenario YAML, relative to the sweep file")
    name: str | None = Field(None, min_length=1, description="default: the scenario's name")
    overrides: dict[str, Any] = Field({}, description="dotted scenario fields, e.g. fleet.islands: 2")


class PolicySpec(Strict):
    name: str = Field(min_length=1)
    params: dict[str, Any] = {}
    label: str | None = Field(None, min_length=1, max_length=200)
    references: list[str] | None = Field(None, min_length=1, description="labels a matched control follows")
    draws: int = Field(1, ge=1, le=100_000, description="runs per seed (matched controls: R)")
    role: Literal["policy", "control"] | None = Field(
        None, description="control: a randomised comparator (default for matched_random); policy: evaluated"
    )
    regimes: list[str] | None = Field(None, min_length=1, description="run only in these regimes (names)")


class BootstrapSpec(Strict):
    n_resamples: int = Field(9999, ge=10, le=10_000_000)
    confidence: float = Field(0.95, gt=0, lt=1)
    method: Literal["BCa", "percentile", "basic"] = "BCa"
    seed: int = Field(0, ge=0, description="seed of the bootstrap resampling streams")

    @field_validator("method", mode="before")
    @classmethod
    def _method_case(cls, v):
        if isinstance(v, str):
            for m in ("BCa", "percentile", "basic"):
                if v.lower() == m.lower():
                    return m
        return v


class GateSpec(Strict):
    alpha: float = Field(0.05, gt=0, lt=1, description="family-wise level after Holm correction")
    min_p95_ratio: float = Field(1.05, ge=1, le=100, description="smallest p95 ratio that counts as transfer")
    transfer: Literal["matched", "overlap"] = Field(
        "matched",
        description="matched: overlapping requests vs the same requests under no_sync (CRN); "
        "overlap: overlapping vs non-overlapping requests of the same run",
    )
    envelope: tuple[float, float] = (2.5, 97.5)

    @field_validator("envelope")
    @classmethod
    def _env(cls, v):
        lo, hi = v
        if not (0 <= lo < hi <= 100):
            raise ValueError(f"envelope percentiles must satisfy 0 <= low < high <= 100 (got {lo}, {hi})")
        return v


class SweepSpec(Strict):
    name: str = "sweep"
    description: str = ""
    regimes: list[RegimeSpec] = Field(min_length=1)
    policies: list[PolicySpec] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1, max_length=100_000)
    horizon_s: float | None = Field(None, gt=0, le=7 * 86400)
    overrides: dict[str, Any] = {}
    bootstrap: BootstrapSpec = BootstrapSpec()
    gate: GateSpec = GateSpec()
    timeline_seed: int | None = Field(None, ge=0)

    @field_validator("regimes", mode="before")
    @classmethod
    def _regime_strings(cls, v):
        if isinstance(v, list):
            return [{"path": r} if isinstance(r, str) else r for r in v]
        return v

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_count(cls, v):
        if isinstance(v, bool):
            raise ValueError("must be a count of seeds or a list of seeds")
        if isinstance(v, int):
            if v < 1 or v > 100_000:
                raise ValueError(f"a seed count must be between 1 and 100000 (got {v})")
            return list(range(v))
        return v

    @field_validator("seeds")
    @classmethod
    def _seed_list(cls, v):
        if any(s < 0 or s >= 2**63 for s in v):
            raise ValueError("seeds must be non-negative integers")
        if len(set(v)) != len(v):
            raise ValueError("seeds must be distinct")
        return v

    @field_validator("timeline_seed")
    @classmethod
    def _timeline(cls, v, info: ValidationInfo):
        seeds = info.data.get("seeds")
        if v is not None and seeds is not None and v not in seeds:
            raise ValueError(f"timeline_seed {v} is not one of the sweep's seeds")
        return v


# ---- plan ------------------------------------------------------------------------------------


def stable_hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class Regime:
    name: str
    path: str
    scenario: Scenario = field(repr=False)
    digest: str = ""


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
    spec: SweepSpec
    file: str
    regimes: list[Regime]
    arms: list[Arm]
    plugins: tuple[str, ...] = ()

    @property
    def seeds(self) -> list[int]:
        return list(self.spec.seeds)

    @property
    def timeline_seed(self) -> int:
        return self.spec.timeline_seed if self.spec.timeline_seed is not None else self.spec.seeds[0]

    def arm(self, label: str) -> Arm:
        return next(a for a in self.arms if a.label == label)

    def regime(self, name: str) -> Regime:
        return next(r for r in self.regimes if r.name == name)

    def key(self, regime: Regime, arm: Arm, seed: int, draw: int) -> tuple:
        return (regime.digest, arm.label, arm.params_hash, int(seed), int(draw))

    def tasks(self) -> list[Task]:
        """Every run, in the deterministic order of the outputs: regime, policy, seed, draw."""
        out = []
        base = next(a for a in self.arms if a.role == "baseline")
        for r in self.regimes:
            for a in self.arms:
                if not a.runs_in(r.name):
                    continue
                ref = self.arm(a.reference) if a.reference else None
                for s in self.spec.seeds:
                    for d in range(a.draws):
                        out.append(
                            Task(
                                r.name,
                                a.label,
                                s,
                                d,
                                self.key(r, a, s, d),
                                self.key(r, ref, s, 0) if ref else None,
                                None if a is base else self.key(r, base, s, 0),
                            )
                        )
        return out

    def identity(self) -> str:
        """What makes two sweeps the same run set (analysis settings may change on resume)."""
        return stable_hash(
            {
                "regimes": [(r.name, r.digest) for r in self.regimes],
                "arms": [(a.label, a.name, a.params_hash, a.draws, a.reference, a.regimes) for a in self.arms],
                "seeds": self.seeds,
                "timeline_seed": self.timeline_seed,
            },
            32,
        )

    def describe(self) -> dict[str, Any]:
        """JSON description kept in the store, enough to re-render the report without the YAML."""
        return {
            "name": self.spec.name,
            "description": self.spec.description,
            "file": self.file,
            "identity": self.identity(),
            "regimes": [
                {
                    "name": r.name,
                    "path": r.path,
                    "scenario_hash": r.digest,
                    "horizon_s": r.scenario.horizon_s,
                    "workload": r.scenario.workload.get("kind"),
                }
                for r in self.regimes
            ],
            "arms": [
                {
                    "label": a.label,
                    "name": a.name,
                    "params": a.params,
                    "params_hash": a.params_hash,
                    "draws": a.draws,
                    "role": a.role,
                    "reference": a.reference,
                    "regimes": list(a.regimes) if a.regimes is not None else None,
                }
                for a in self.arms
            ],
            "seeds": self.seeds,
            "timeline_seed": self.timeline_seed,
            "bootstrap": self.spec.bootstrap.model_dump(mode="json"),
            "gate": self.spec.gate.model_dump(mode="json"),
        }


def plugin_modules() -> tuple[str, ...]:
    """Extra policy modules to import in the parent and in every worker: $WADILOCO_PLUGINS, a
    comma- or os.pathsep-separated list of module names or .py file paths (set by the operator,
    never read from a sweep file)."""
    raw = os.environ.get(PLUGINS_ENV, "")
    parts = [p.strip() for chunk in raw.split(",") for p in chunk.split(os.pathsep)]
    return tuple(str(Path(p).resolve()) if p.endswith(".py") else p for p in parts if p)


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
    from wadiloco.models.config import check_policy

    for reg in regimes:
        try:
            check_policy(reg.scenario, name, params, file, where)
        except InputError as e:
            if len(regimes) > 1 and e.where.endswith(".params") and "corridor" in e.message:
                raise InputError(e.file, e.where, f"{e.message} in regime {reg.name!r}") from None
            raise


def build_plan(spec: SweepSpec, file: str | Path, base_dir: str | Path) -> Plan:
    from wadiloco.experiments.worker import load_plugins
    from wadiloco.models.policies import POLICIES

    file = str(file)
    base = Path(base_dir)
    plugins = plugin_modules()
    load_plugins(plugins)

    # Regimes: scenario + sweep-wide overrides + the regime's own overrides.
    regimes: list[Regime] = []
    for i, r in enumerate(spec.regimes):
        p = Path(r.path)
        p = p if p.is_absolute() else base / p
        if not p.exists():
            raise InputError(file, f"regimes.{i}.path", f"scenario file not found: {r.path} (looked for {p})")
        sc = load_scenario(p)
        # The scenario's own `policy` is not used by a sweep (the sweep names its policies), so it
        # is neutralised first: it cannot clash with an overridden corridor, and it does not enter
        # the scenario hash.
        merged: dict[str, Any] = {"policy.name": BASELINE, "policy.params": {}}
        origin: dict[str, str] = {}  # dotted field -> where the sweep file set it
        for k, v in spec.overrides.items():
            merged[k], origin[k] = v, f"overrides.{k}"
        if spec.horizon_s is not None:
            merged["horizon_s"], origin["horizon_s"] = spec.horizon_s, "horizon_s"
        for k, v in r.overrides.items():
            merged[k], origin[k] = v, f"regimes.{i}.overrides.{k}"
        try:
            sc = with_overrides(sc, merged)
        except InputError as e:
            # a field-level problem names its override; a scenario-wide one (e.g. h_min > h_max)
            # names the most specific override block
            where = origin.get(e.where) or next(
                (w for k, w in origin.items() if e.where and (k.startswith(e.where + ".") or e.where.startswith(k))),
                f"regimes.{i}.overrides" if r.overrides else "overrides",
            )
            raise InputError(
                file, where, f"does not apply to {p}: {e.where + ': ' if e.where else ''}{e.message}"
            ) from None
        name = r.name or sc.name
        if any(x.name == name for x in regimes):
            raise InputError(file, f"regimes.{i}.name", f"two regimes are named {name!r}; give each a distinct `name`")
        regimes.append(Regime(name, str(p), sc, sc.digest()))

    # Policies: validate names and params against the registry, expand matched controls.
    entries: list[tuple[int, PolicySpec, str]] = []
    counts: dict[str, int] = {}
    for ps in spec.policies:
        counts[ps.name] = counts.get(ps.name, 0) + 1
    names = [r.name for r in regimes]
    for i, ps in enumerate(spec.policies):
        for j, rn in enumerate(ps.regimes or []):
            if rn not in names:
                raise InputError(
                    file,
                    f"policies.{i}.regimes.{j}",
                    f"no regime named {rn!r} in this sweep (regimes: {', '.join(names)})",
                )
        if ps.name not in POLICIES:
            raise InputError(
                file, f"policies.{i}.name", f"unknown policy {ps.name!r}; known: {', '.join(sorted(POLICIES))}"
            )
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
                file,
                f"policies.{i}.role",
                f"a control follows a reference's merge budget; {ps.name!r} takes no reference",
            )
        if ps.name == BASELINE and ps.draws != 1:
            raise InputError(file, f"policies.{i}.draws", "no_sync is deterministic; it takes no draws")
        label = ps.label or (ps.name if counts[ps.name] == 1 or takes_ref else _auto_label(ps))
        if not takes_ref:
            _check_in_regimes(_only(regimes, ps.regimes), ps.name, ps.params, file, f"policies.{i}")
        entries.append((i, ps, label))

    plain = {}
    for i, ps, label in entries:
        if not ps.references:
            if label in plain:
                raise InputError(file, f"policies.{i}.label", f"label {label!r} is used twice; labels must be distinct")
            plain[label] = (i, ps)
    arms: list[Arm] = []  # in the YAML's order; a control's arms follow its references' order
    for i, ps, label in entries:
        if not ps.references:
            role = "baseline" if ps.name == BASELINE else "policy"
            arms.append(
                Arm(
                    label,
                    ps.name,
                    dict(ps.params),
                    stable_hash([ps.name, ps.params]),
                    ps.draws,
                    role,
                    None,
                    _regime_set(ps.regimes, None, names),
                )
            )
            continue
        if len(set(ps.references)) != len(ps.references):
            raise InputError(file, f"policies.{i}.references", "a reference is listed twice")
        for j, ref in enumerate(ps.references):
            if ref not in plain:
                raise InputError(
                    file,
                    f"policies.{i}.references.{j}",
                    f"no policy labelled {ref!r} in this sweep (labels: {', '.join(plain)})",
                )
            _, rps = plain[ref]
            if rps.name == BASELINE:
                raise InputError(
                    file, f"policies.{i}.references.{j}", "no_sync never merges; a matched control cannot follow it"
                )
            if rps.draws != 1:
                raise InputError(
                    file,
                    f"policies.{i}.references.{j}",
                    f"{ref!r} has draws > 1; a matched control follows a policy with one run per seed",
                )
            params = {**ps.params, "reference": rps.name, "reference_params": dict(rps.params)}
            where_ok = _regime_set(ps.regimes, rps.regimes, names)
            if where_ok == ():
                raise InputError(file, f"policies.{i}.regimes", f"runs in no regime where its reference {ref!r} runs")
            _check_in_regimes(_only(regimes, where_ok), ps.name, params, file, f"policies.{i}")
            alabel = ps.label if ps.label and len(ps.references) == 1 else f"{label}[{ref}]"
            if alabel in plain or alabel in {a.label for a in arms}:
                raise InputError(file, f"policies.{i}.label", f"label {alabel!r} is used twice")
            role = ps.role or ("control" if POLICIES[ps.name].control else "policy")
            arms.append(Arm(alabel, ps.name, params, stable_hash([ps.name, params]), ps.draws, role, ref, where_ok))
    base = [a for a in arms if a.role == "baseline"]
    if base and base[0].regimes is not None:
        raise InputError(file, "policies", "no_sync is the baseline of every regime; it takes no `regimes`")
    if not any(a.role == "baseline" for a in arms):
        raise InputError(file, "policies", "the protocol needs the load-match baseline: add `- {name: no_sync}`")
    if sum(a.role == "baseline" for a in arms) > 1:
        raise InputError(file, "policies", "list no_sync once")
    return Plan(spec, file, regimes, arms, plugins)


def load_sweep(path: str | Path) -> Plan:
    p = Path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise InputError(p, "", f"expected a mapping of fields at the top level (got {type(data).__name__})")
    _check_finite(data, p)
    spec = validate(SweepSpec, data, p)
    return build_plan(spec, p, p.parent)
