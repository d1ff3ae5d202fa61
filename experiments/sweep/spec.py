"""The sweep file's schema: regimes x policies x seeds, validated like scenarios (unknown keys rejected).

A sweep YAML names

    name: smoke                       # optional, for the report
    regimes:                          # scenario files, relative to this YAML
      - ../scenarios/normal.yaml
      - {path: ../scenarios/bursty.yaml, name: bursty_small, overrides: {fleet.hosts_per_island: 1}}
      - product:                      # designs x workloads: v1__bursty, v1__aperiodic, v0__bursty, ...
          design: {v1: {}, v0: {engine.step: sequential}}
          workload: {bursty: ../scenarios/bursty.yaml, aperiodic: ../scenarios/aperiodic.yaml}
        overrides: {fleet.islands: 2}
        group: designs                # policies[].regimes may name the group
    horizon_s: 300                    # optional: every regime's horizon
    overrides: {drain_s: 60}          # optional: dotted scenario fields for every regime
    policies:
      - {name: no_sync}               # required: the load-match baseline
      - {name: fixed, params: {H: 256}, label: fixed_H256}
      - {name: fixed, params: {H: 512}, regimes: [normal]}   # only where 512 fits the corridor
      - {name: matched_random, references: [fixed_H256], draws: 3}
    seeds: 3                          # a count (0..N-1) or a list of seeds
    bootstrap: {n_resamples: 9999, confidence: 0.95, method: BCa, seed: 0}
    gate: {alpha: 0.05, min_p95_ratio: 1.05, transfer: matched, envelope: [2.5, 97.5],
           transfer_alternatives: [1.0, 1.02, 1.1]}
    timeline_seed: 0                  # whose timelines are stored for the timeline figure

How the entries expand into arms and runs: experiments/sweep/plan.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from wadiloco.models.errors import InputError
from wadiloco.models.spec.schema import Strict, check_finite, read_yaml, validate

SEP = "__"  # joins a product's level names into a regime name


class RegimeSpec(Strict):
    """One entry of `regimes`: a scenario file (one regime), or a product of axes (one regime per
    combination of their levels, named by joining the levels' names with `__`)."""

    path: str | None = Field(
        None,
        min_length=1,
        description="Scenario YAML, relative to the sweep file; required unless a `product` axis names the "
        "scenarios. Source: the sweep.",
    )
    name: str | None = Field(
        None,
        min_length=1,
        description="The regime's name in the results; null: the scenario's name (a product's names come from its "
        "levels). Source: the sweep.",
    )
    overrides: dict[str, Any] = Field(
        {},
        description="Dotted scenario fields for this regime (every regime of a product; a level's own win), e.g. "
        "fleet.islands: 2. Source: the sweep.",
    )
    product: dict[str, dict[str, str | dict[str, Any]]] | None = Field(
        None,
        description="Axes, in order, each a mapping of level name -> a scenario path (the axis that names the "
        "scenarios, e.g. workloads) or dotted overrides (e.g. designs, mitigations, loads); one regime per "
        "combination, named LEVEL__LEVEL__..., in the order of the axes (the last varies fastest). Source: the "
        "sweep.",
    )
    group: str | None = Field(
        None,
        min_length=1,
        description="A name for this entry's regimes that `policies[].regimes` may use instead of listing them; "
        "several entries may share one. Source: the sweep.",
    )

    @model_validator(mode="after")
    def _one_scenario_each(self):
        if self.product is None:
            return self  # a missing `path` is named by read_spec, where the field can be
        if self.name is not None:
            raise ValueError("a product's regimes are named by its levels; remove `name`")
        if not self.product:
            raise ValueError("`product` needs at least one axis")
        paths = []
        for axis, levels in self.product.items():
            if not levels:
                raise ValueError(f"product axis {axis!r} has no levels")
            kinds = {isinstance(v, str) for v in levels.values()}
            if len(kinds) > 1:
                raise ValueError(f"product axis {axis!r} mixes scenario paths and overrides; an axis holds one kind")
            if any(not n or SEP in n for n in levels):
                raise ValueError(f"product axis {axis!r}: level names must be non-empty and contain no {SEP!r}")
            paths += [axis] if kinds == {True} else []
        if len(paths) + (self.path is not None) != 1:
            where = f"axes {', '.join(map(repr, paths))}" if paths else "no axis"
            raise ValueError(
                f"each combination needs one scenario: `path`, or exactly one axis of scenario paths ({where} name "
                "scenarios" + (" and `path` is set too)" if self.path is not None else ")")
            )
        return self

    def expand(self, i: int) -> list[Entry]:
        """The regimes this entry stands for, in order, with where each override was set."""
        if self.product is None:
            origin = {k: f"regimes.{i}.overrides.{k}" for k in self.overrides}
            over = dict(self.overrides)
            return [Entry(i, self.name, self.path, over, origin, f"regimes.{i}.path", self.group, False)]
        out = []
        axes = list(self.product.items())
        for combo in itertools.product(*(list(levels.items()) for _, levels in axes)):
            path, where = self.path, f"regimes.{i}.path"
            over = dict(self.overrides)
            origin = {k: f"regimes.{i}.overrides.{k}" for k in self.overrides}
            for (axis, _), (level, v) in zip(axes, combo):
                at = f"regimes.{i}.product.{axis}.{level}"
                if isinstance(v, str):
                    path, where = v, at
                    continue
                for k, x in v.items():
                    over[k], origin[k] = x, f"{at}.{k}"
            name = SEP.join(level for level, _ in combo)
            out.append(Entry(i, name, path, over, origin, where, self.group, True))
        return out


@dataclass(frozen=True)
class Entry:
    """One regime as the sweep file gives it: the entry it comes from (`index`), its name (None: the
    scenario's), scenario path, overrides and where each was set (for error messages), its group,
    and whether a product made it."""

    index: int
    name: str | None
    path: str
    overrides: dict[str, Any]
    origin: dict[str, str]
    path_at: str
    group: str | None
    from_product: bool


class PolicySpec(Strict):
    """One arm: a policy with its parameters, or a matched control following other arms."""

    name: str = Field(min_length=1, description="A registered merge policy (`wadiloco policies`). Source: the sweep.")
    params: dict[str, Any] = Field({}, description="The policy's parameters. Source: the policy's schema.")
    label: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The arm's name in the results (e.g. fixed_H256); null: the policy name, with its params "
        "when a name appears twice (fixed[H=256]). Source: the sweep.",
    )
    references: list[str] | None = Field(
        None,
        min_length=1,
        description="Labels of the arms a matched control follows (spends their merge budget). Source: design card "
        "(the protocol).",
    )
    draws: int = Field(
        1,
        ge=1,
        le=100_000,
        description="Runs per seed; for a matched control, R, the draws of its envelope. Unit: runs. Source: "
        "design card (the protocol).",
    )
    role: Literal["policy", "control"] | None = Field(
        None,
        description="control: a randomised comparator (the default for matched_random); policy: evaluated. Source: "
        "design card (the protocol).",
    )
    regimes: list[str] | None = Field(
        None,
        min_length=1,
        description="Run only in these regimes (names, or groups of `regimes[].group`); null: all. Source: the sweep.",
    )


class BootstrapSpec(Strict):
    """The bootstrap confidence interval every mean carries (scipy.stats.bootstrap)."""

    n_resamples: int = Field(
        9999,
        ge=10,
        le=10_000_000,
        description="Bootstrap resamples. Unit: resamples. Source: statistics (scipy's default).",
    )
    confidence: float = Field(
        0.95,
        gt=0,
        lt=1,
        description="Confidence level of the intervals. Unit: fraction. Source: statistics (scipy's default).",
    )
    method: Literal["BCa", "percentile", "basic"] = Field(
        "BCa", description="Interval method (case-insensitive). Source: statistics (scipy's default)."
    )
    seed: int = Field(0, ge=0, description="Seed of the bootstrap's resampling streams. Source: project choice.")

    @field_validator("method", mode="before")
    @classmethod
    def _method_case(cls, v):
        if isinstance(v, str):
            for m in ("BCa", "percentile", "basic"):
                if v.lower() == m.lower():
                    return m
        return v


class GateSpec(Strict):
    """The claim gate: when a placement claim is allowed (docs/model.md, section 5)."""

    alpha: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Family-wise level of the placement tests after Holm correction. Unit: probability. Source: "
        "statistics (the conventional level).",
    )
    min_p95_ratio: float = Field(
        1.05,
        ge=1,
        le=100,
        description="Smallest p95 ratio that counts as the effect transferring. Unit: ratio. Source: project choice.",
    )
    transfer: Literal["matched", "overlap"] = Field(
        "matched",
        description="matched: requests overlapping a merge vs the same requests under no_sync (common random "
        "numbers); overlap: overlapping vs non-overlapping requests of the same run. Source: design card "
        "(the protocol).",
    )
    envelope: tuple[float, float] = Field(
        (2.5, 97.5),
        description="Percentiles of the matched-random envelope. Unit: percentiles. Source: design card "
        "(the protocol).",
    )
    transfer_alternatives: list[float] = Field(
        [1.0, 1.02, 1.1],
        max_length=20,
        description="Other min_p95_ratio values the report shows the verdicts at. Unit: ratio. Source: project choice.",
    )

    @field_validator("transfer_alternatives")
    @classmethod
    def _alts(cls, v):
        if any(not (1 <= x <= 100) for x in v):
            raise ValueError("transfer alternatives are p95 ratios between 1 and 100")
        return v

    @field_validator("envelope", mode="before")
    @classmethod
    def _env_list(cls, v):
        return tuple(v) if isinstance(v, list) else v  # YAML and JSON have lists, not tuples

    @field_validator("envelope")
    @classmethod
    def _env(cls, v):
        lo, hi = v
        if not (0 <= lo < hi <= 100):
            raise ValueError(f"envelope percentiles must satisfy 0 <= low < high <= 100 (got {lo}, {hi})")
        return v


class SweepSpec(Strict):
    """A sweep file: regimes x policies x seeds, run with the calibration protocol."""

    name: str = Field("sweep", description="Name shown in the report. Source: the sweep.")
    description: str = Field("", description="Free text shown in the report. Source: the sweep.")
    regimes: list[RegimeSpec] = Field(
        min_length=1,
        description="Scenario files (a path, or a mapping as below: one scenario, or a product of axes). Source: "
        "the sweep.",
    )
    policies: list[PolicySpec] = Field(
        min_length=1, description="The arms; no_sync is required (the load-match baseline). Source: the sweep."
    )
    seeds: list[int] = Field(
        min_length=1,
        max_length=100_000,
        description="A count N (seeds 0..N-1) or a list of distinct seeds. Unit: seeds. Source: the sweep.",
    )
    horizon_s: float | None = Field(
        None,
        gt=0,
        le=7 * 86400,
        description="Every regime's horizon_s; null: each scenario's. Unit: s. Source: the sweep.",
    )
    overrides: dict[str, Any] = Field(
        {}, description="Dotted scenario fields for every regime (a regime's own overrides win). Source: the sweep."
    )
    bootstrap: BootstrapSpec = Field(
        BootstrapSpec(), description="The bootstrap intervals. Source: statistics (scipy's defaults)."
    )
    gate: GateSpec = Field(GateSpec(), description="The claim gate. Source: design card (the protocol).")
    timeline_seed: int | None = Field(
        None, ge=0, description="The seed whose timelines are stored for the timeline figure. Source: the sweep."
    )

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


def read_spec(path: str | Path) -> SweepSpec:
    """A sweep YAML, validated (errors name the file and the field)."""
    p = Path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise InputError(p, "", f"expected a mapping of fields at the top level (got {type(data).__name__})")
    check_finite(data, p)
    spec = validate(SweepSpec, data, p)
    for i, r in enumerate(spec.regimes):
        if r.path is None and r.product is None:
            raise InputError(p, f"regimes.{i}.path", "missing: a regime needs a scenario path (or a `product`)")
    return spec
