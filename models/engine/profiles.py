"""Engine profiles: an engine on a GPU serving a model, as a data file with a schema.

A profile (YAML, `models/data/profiles/<name>.yaml` or any path) names its measurements and which
runs set which number; the numbers are fitted when a run first needs them, once per file content
(kept on disk: `profile_cache_dir`), and printed by `wadiloco calibrate PROFILE`. A user adds their
own engine and GPU by writing such a file next to a measurements file of the same shape as
`models/data/testbed/stage10.yaml`. Measurements are read through the `MEASUREMENTS` registry
(`Measurements`: a run's iteration time, start delay and co-tenant weight); the testbed plug-in
registers its Stage 10 matrix (models/testbed/fit.py).

What a profile gives the simulator, per model: the GPU time of one engine iteration,
`a + d * batch` seconds (no host part: the GPU-bound twin), and the serving start delay (engine init);
per co-tenant setting: its weight against a serving job on the GPU link.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Protocol

from pydantic import Field

from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.errors import InputError
from wadiloco.models.plugins import Registry
from wadiloco.models.spec.files import beside, check_input, named_by, read_input
from wadiloco.models.spec.schema import Strict, read_yaml, validate

PACKAGED = "profiles"


class Measurements(Protocol):
    """A measurements file's named runs, as a profile's fit reads them (times in seconds)."""

    def runs(self) -> set[str]:
        """The runs' names."""
        ...

    def digest(self) -> str:
        """What the numbers below depend on (the file and the code that reads them), for the fit cache."""
        ...

    def iteration(self, run: str) -> tuple[float, int]:
        """(GPU time of one engine iteration, the batch size it was measured at)."""
        ...

    def start_delay(self, run: str) -> float:
        """The serving start delay (engine init)."""
        ...

    def cotenant_weight(self, run: str) -> float:
        """The co-tenant's weight against a serving job of weight 1 on the GPU."""
        ...


MEASUREMENTS: Registry[str, Measurements] = Registry("measurements")  # by a profile's `measurements:`


def register_measurements(name: str, m: Measurements) -> None:
    MEASUREMENTS[name] = m


class RunsRef(Strict):
    runs: list[str] = Field(min_length=1, description="measurement runs this number is fitted from")


class ProfileSpec(Strict):
    name: str
    description: str = ""
    gpu: str = ""
    engine: str = ""
    measurements: str = Field(description="measurements file: a packaged name under models/data or a path")
    models: dict[str, RunsRef] = Field(min_length=1)
    batch_slope: RunsRef | None = Field(
        None, description="two runs of one model at different batch sizes; null: no growth with the batch"
    )
    batch_slope_scale: float = Field(1.0, ge=0, le=100, description="times the fitted slope (sensitivity rows)")
    cotenants: dict[str, RunsRef] = {}


@dataclass(frozen=True)
class ModelFit:
    """One model's engine iteration: GPU time a + d * batch (s), and its start delay (s)."""

    a: float
    d: float
    start_delay_s: float
    reference_batch: int
    runs: tuple[str, ...]

    def iteration_s(self, batch: int) -> float:
        return self.a + self.d * batch

    def latency(self) -> LatencyModel:
        return LatencyModel(self.a, 0.0, 0.0, self.d, r2=math.nan, n=len(self.runs), max_rel_err=math.nan)


@dataclass(frozen=True)
class Profile:
    """A profile file and its fit: one object, whatever a run reads of it (a model's law, a co-tenant's weight)."""

    spec: ProfileSpec
    source: str
    relative_slope: float  # d / (a + d * c_ref): growth of an iteration per extra sequence
    models: dict[str, ModelFit]
    cotenants: dict[str, float]

    def model(self, name: str, file: object = "<scenario>", field: str = "engine.model") -> ModelFit:
        if name not in self.models:
            raise InputError(file, field, _unknown(self.spec, "model", name, self.models))
        return self.models[name]

    def cotenant(self, name: str, file: object = "<scenario>", field: str = "cotenant.profile_entry") -> float:
        if name not in self.cotenants:
            raise InputError(file, field, _unknown(self.spec, "co-tenant", name, self.cotenants))
        return self.cotenants[name]


def _unknown(spec: ProfileSpec, what: str, name: str, known) -> str:
    return f"profile {spec.name!r} has no {what} {name!r}; known: {', '.join(sorted(known)) or 'none'}"


def profile_path(name_or_path: str | Path) -> Path | None:
    """A path as given if it is a file; else the packaged profile of that name (None if neither)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    packaged = resources.files("wadiloco.models.data").joinpath(PACKAGED, f"{name_or_path}.yaml")
    return Path(str(packaged)) if packaged.is_file() else None


def packaged_profiles() -> list[str]:
    folder = resources.files("wadiloco.models.data").joinpath(PACKAGED)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """The profile at a path (or packaged under that name), fitted: from this process's memory, else
    from the disk cache (`profile_cache_dir`), else fitted now and cached. Keyed by the file's bytes
    and the fit's own inputs (the measurements and the fitting code), so an edited file is fitted
    again and an unchanged one never is."""
    path = profile_path(name_or_path)
    if path is None:
        raise InputError(
            name_or_path,
            "",
            f"no such profile file, and no packaged profile of that name (packaged: {', '.join(packaged_profiles())})",
        )
    raw = read_input(path, "engine profile")  # a regular file within the input size limit
    key = _cache_key(raw)
    hit = _LOADED.get((key, str(path)))
    if hit is None:
        spec = validate(ProfileSpec, read_yaml(path, quote=False), path, quote=False)
        hit = _cached(key, spec, str(path))
        if hit is None:
            hit = fit_profile(spec, str(path))
            _store(key, hit)
        _LOADED[key, str(path)] = hit
    return hit


_LOADED: dict[tuple[str, str], Profile] = {}  # (cache key, path) -> the profile, this process
CACHE_ENV = "WADILOCO_CACHE_DIR"
CACHE_FORMAT = 1  # the entries' layout: an entry of another format is ignored (and replaced)


def profile_cache_dir() -> Path:
    """Where fitted profiles are kept between processes: $WADILOCO_CACHE_DIR, else the user's cache
    folder ($XDG_CACHE_HOME or ~/.cache) under wadiloco/profiles."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given) / "profiles"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wadiloco" / "profiles"


def _cache_key(raw: bytes) -> str:
    return hashlib.sha256(raw + b"\0" + _fit_inputs().encode()).hexdigest()


def _fit_inputs() -> str:
    """What every fit depends on besides the profile (each registered measurements' digest)."""
    return _digests(tuple(sorted(MEASUREMENTS)))


@cache
def _digests(names: tuple[str, ...]) -> str:
    """The measurements' digests, once per process."""
    return "\n".join(f"{n}:{MEASUREMENTS[n].digest()}" for n in names)


def _cached(key: str, spec: ProfileSpec, source: str) -> Profile | None:
    """The cache entry of `key` as a Profile, or None: missing, unreadable, corrupt, of another
    format, or not this key's (each of which is refitted)."""
    try:
        doc = json.loads((profile_cache_dir() / f"{key}.json").read_text())
        if doc["format"] != CACHE_FORMAT or doc["key"] != key or set(doc["models"]) != set(spec.models):
            return None
        models = {name: _model_entry(m) for name, m in doc["models"].items()}
        cot = {str(k): float(v) for k, v in doc["cotenants"].items()}
        if set(cot) != set(spec.cotenants):
            return None
        return Profile(spec, source, float(doc["relative_slope"]), models, cot)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _model_entry(m: dict) -> ModelFit:
    runs = tuple(str(r) for r in m["runs"])
    return ModelFit(float(m["a"]), float(m["d"]), float(m["start_delay_s"]), int(m["reference_batch"]), runs)


def _store(key: str, p: Profile) -> None:
    """Write `p`'s fit as the entry of `key` (atomically: a temp file renamed); a cache that cannot be
    written is no error (the next process fits again). JSON floats round-trip exactly."""
    doc = {
        "format": CACHE_FORMAT,
        "key": key,
        "profile": p.spec.name,
        "relative_slope": p.relative_slope,
        "models": {n: {**asdict(m), "runs": list(m.runs)} for n, m in p.models.items()},
        "cotenants": p.cotenants,
    }
    folder = profile_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        pass


def fit_profile(spec: ProfileSpec, source: str) -> Profile:
    """The one fit of a profile: every model and co-tenant entry (`load_profile` caches it)."""
    m = MEASUREMENTS.get(spec.measurements)
    if m is None:
        msg = f"no measurements {spec.measurements!r} are registered (registered: {MEASUREMENTS.known()})"
        raise InputError(source, "measurements", msg)
    known = m.runs()
    for where, refs in (
        [("batch_slope", spec.batch_slope)]
        + [(f"models.{k}", v) for k, v in spec.models.items()]
        + [(f"cotenants.{k}", v) for k, v in spec.cotenants.items()]
    ):
        for run in refs.runs if refs else []:
            if run not in known:
                raise InputError(source, f"{where}.runs", f"no run {run!r} in {spec.measurements}")
    slope = _slope(m, spec, source)
    models = {name: _model_fit(m, ref.runs, slope, source, f"models.{name}.runs") for name, ref in spec.models.items()}
    cot = {name: _mean([m.cotenant_weight(r) for r in ref.runs]) for name, ref in spec.cotenants.items()}
    _check_physical(spec, source, slope, models, cot)
    return Profile(spec, source, slope, models, cot)


def _check_physical(spec: ProfileSpec, source: str, slope: float, models: dict, cot: dict) -> None:
    """A fit a run can use: every iteration takes a positive time, no shorter for a larger batch (a
    zero or negative time lets an engine loop without its clock moving), start delays and co-tenant
    weights finite and not negative. Refused naming the term that breaks it."""
    if slope < 0:
        why = f"the fitted batch slope is negative ({slope:.4g} of an iteration per sequence)"
        raise InputError(source, "batch_slope.runs", f"{why}: iterations would get shorter as the batch grows")
    for name, fm in models.items():
        if not (fm.a > 0 and math.isfinite(fm.a) and math.isfinite(fm.d)):
            _refuse_time(spec, source, slope, name, fm, models)
        if not (math.isfinite(fm.start_delay_s) and fm.start_delay_s >= 0):
            raise InputError(source, f"models.{name}.runs", "the fitted start delay is negative or not finite")
    for name, w in cot.items():
        if not (math.isfinite(w) and w >= 0):
            raise InputError(source, f"cotenants.{name}.runs", "the fitted co-tenant weight is negative or not finite")


def _refuse_time(spec: ProfileSpec, source: str, slope: float, name: str, m: ModelFit, models: dict) -> None:
    """The error for a model whose iteration is not positive at every batch: the scale when the
    unscaled slope would do (with the largest scale that does), else the slope's runs, else the model's."""
    law = f"model {name}: an iteration of a batch of b would take {m.a * 1e3:.4g} ms + {m.d * 1e6:.4g} us x b"
    scale = spec.batch_slope_scale
    unscaled = slope / scale if scale > 0 else 0.0
    if unscaled * m.reference_batch < 1 < slope * m.reference_batch:  # the scale breaks it
        most = min(1.0 / (unscaled * f.reference_batch) for f in models.values())
        msg = f"{scale:g} makes iteration times negative at small batches ({law}); below {most:.3g} keeps them positive"
        raise InputError(source, "batch_slope_scale", msg)
    if slope * m.reference_batch >= 1:
        raise InputError(source, "batch_slope.runs", f"the fitted batch slope is too steep: {law}")
    raise InputError(source, f"models.{name}.runs", f"the fitted iteration time is not positive: {law}")


def _slope(m: Measurements, spec: ProfileSpec, source: str) -> float:
    """The batch growth per sequence: the batch_slope runs' relative growth, times its scale."""
    return spec.batch_slope_scale * _relative_slope(m, spec.batch_slope.runs, source) if spec.batch_slope else 0.0


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def _relative_slope(m: Measurements, runs: list[str], source: str = "<profile>") -> float:
    """The batch growth per sequence: d / (a + d * c) of two runs of one model at two batch sizes."""
    if len(runs) != 2:
        raise InputError(source, "batch_slope.runs", "needs exactly two runs (two batch sizes)")
    (t1, c1), (t2, c2) = sorted(m.iteration(r) for r in runs)
    if c1 == c2:
        raise InputError(source, "batch_slope.runs", "the two runs have the same batch size")
    return (t2 - t1) / (c2 - c1) / (t2 if c2 > c1 else t1)


def _model_fit(
    m: Measurements, runs: list[str], slope: float, source: str = "<profile>", where: str = "models.runs"
) -> ModelFit:
    its = [m.iteration(r) for r in runs]
    c_ref = its[0][1]
    if any(c != c_ref for _, c in its):
        raise InputError(source, where, "a model's runs must share one batch size")
    t_ref = _mean(t for t, _ in its)
    d = slope * t_ref
    delay = _mean(m.start_delay(r) for r in runs)
    return ModelFit(t_ref - d * c_ref, d, delay, c_ref, tuple(runs))


# ---- a scenario's engine profile: `engine.profile`, `engine.model`, `cotenant.profile_entry` ------------


def resolve_profile(name: str, base_dir: str, file: object) -> Path:
    """The profile file `engine.profile` names: a path ending in .yaml or .yml (relative to the
    scenario's folder, never the working folder), or a packaged name."""
    if Path(name).suffix in (".yaml", ".yml"):
        path = beside(name, base_dir)
        check_input(path, file, "engine.profile", "engine profile (YAML)")
        return path
    path = profile_path(name)
    if path is None:
        known = ", ".join(packaged_profiles())
        msg = f"no profile file {name!r} and no packaged profile of that name (packaged: {known})"
        raise InputError(file, "engine.profile", msg)
    return path


def check_refs(path: Path, model: str | None, entry: str | None, file: object) -> None:
    """That the profile at `path` has `model` and co-tenant `entry` (those given): its spec read, not
    fitted (the fit comes when a run needs it: `load_profile`)."""
    with named_by(file, "engine.profile"):
        spec = validate(ProfileSpec, read_yaml(path, quote=False), path, quote=False)
    if model is not None and model not in spec.models:
        raise InputError(file, "engine.model", _unknown(spec, "model", model, spec.models))
    if entry is not None and entry not in spec.cotenants:
        raise InputError(file, "cotenant.profile_entry", _unknown(spec, "co-tenant", entry, spec.cotenants))
