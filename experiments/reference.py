"""Reference pages from the schemas: every field a scenario or a sweep file may set.

    python -m wadiloco.experiments.reference [--out DIR] [--check]

Writes DIR/scenario.md and DIR/sweep.md (DIR defaults to docs/reference in the checkout). Each row
is a field's dotted path, type (with its bounds), default, unit, meaning and source, read from the
pydantic models (`models.spec.scenario`, `experiments.sweep.spec`) and from the registries of
workload kinds, merge policies and routers, so the pages cannot drift from the code: a test
regenerates them and compares. `--check` writes nothing and exits 1 naming the stale pages.

A description reads "meaning. Unit: U. Source: S." (the unit only where the field has one); the
sources are quoted with their figures in docs/sources.md.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

_CHECKOUT = Path(__file__).resolve().parents[1]
# the checkout's pages; from an installed package (no docs/ beside it), docs/reference under the current folder
DOCS_REFERENCE = (_CHECKOUT if (_CHECKOUT / "docs").is_dir() else Path.cwd()) / "docs" / "reference"
COMMAND = "python -m wadiloco.experiments.reference"
HEADER = ["| field | type | default | unit | meaning | source |", "|---|---|---|---|---|---|"]
_BOUNDS = ((at.Ge, "ge", ">="), (at.Gt, "gt", ">"), (at.Le, "le", "<="), (at.Lt, "lt", "<"))


def split_description(text: str | None) -> tuple[str, str, str]:
    """(meaning, unit, source) of a description written "meaning. Unit: U. Source: S."."""
    text = (text or "").strip()
    meaning, _, source = text.partition(" Source: ")
    if not source and text.startswith("Source: "):
        meaning, source = "", text[len("Source: ") :]
    meaning, _, unit = meaning.partition(" Unit: ")
    return meaning.strip(), unit.strip().rstrip("."), source.strip().rstrip(".")


def number(v: Any) -> str:
    """A number as a scenario file would write it: 100, 0.0049, 1e9, 2.5e8."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int) and (abs(v) < 10**7 or v % 10**6):
        return str(v)
    return f"{v:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def value(v: Any) -> str:
    """A default in YAML's flow style."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return number(v)
    if isinstance(v, str):
        return v if v else '""'
    if isinstance(v, BaseModel):
        v = v.model_dump()
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(value(x) for x in v) + "]"
    return str(v)


def bounds(metadata: list) -> str:
    out = []
    for m in metadata:
        for kind, attr, op in _BOUNDS:
            if isinstance(m, kind):
                out.append(f"{op} {number(getattr(m, attr))}")
        if isinstance(m, at.MinLen) and m.min_length:
            out.append(f"length >= {m.min_length}")
        if isinstance(m, at.MaxLen):
            out.append(f"length <= {number(m.max_length)}")
        if isinstance(m, FieldInfo):
            out.append(bounds(m.metadata))
    return ", ".join(x for x in out if x)


def models_in(ann: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation can hold (through Optional, unions and Annotated)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in typing.get_args(ann) for m in models_in(a)]


def type_name(ann: Any, metadata: list | None = None) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return type_name(args[0], [*args[1:], *(metadata or [])])
    if origin is typing.Literal:
        base = "one of " + ", ".join(f"`{a}`" for a in args)
    elif origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        names = dict.fromkeys(type_name(a) for a in kinds)  # timetables of every kind read "timetable" once
        base = " or ".join(names) + (" or null" if len(kinds) < len(args) else "")
    elif origin is list:
        base = f"list of {type_name(args[0])}"
    elif origin is tuple:
        base = "[" + ", ".join(type_name(a) for a in args) + "]"
    elif origin is dict or ann is dict:
        base = "mapping"
    elif isinstance(ann, type) and issubclass(ann, BaseModel):
        base = "timetable (below)" if ann.__name__.endswith("Timetable") else "mapping"
    else:
        base = {int: "int", float: "float", bool: "bool", str: "string"}.get(ann, str(ann))
    extra = bounds(metadata or [])
    return f"{base} ({extra})" if extra else base


def default_of(f: FieldInfo) -> str:
    if f.is_required():
        return "required"
    d = f.get_default(call_default_factory=True)
    if isinstance(d, BaseModel) and "kind" not in type(d).model_fields:
        return "see below"
    return f"`{value(d)}`"


def cell(text: str) -> str:
    return (text or "-").replace("|", "\\|").replace("\n", " ")


def field_row(path: str, f: FieldInfo, note: str = "") -> str:
    meaning, unit, source = split_description(f.description)
    kind = cell(type_name(f.annotation, f.metadata))
    return (
        "| "
        + " | ".join([f"`{path}`", kind, default_of(f), cell(unit), cell((note + meaning).strip()), cell(source)])
        + " |"
    )


def kind_of(model: type[BaseModel]) -> str | None:
    """The `kind` a model of a tagged union stands for, if it has one."""
    f = model.model_fields.get("kind")
    args = typing.get_args(f.annotation) if f is not None else ()
    return str(args[0]) if len(args) == 1 else None


def rows(model: type[BaseModel], prefix: str, note: str = "") -> list[str]:
    """One row per field of `model`, nested models (not timetables) flattened into dotted paths; the
    members of a tagged union (`kind: ...`) share one `kind` row and say which kind each field is of."""
    out = []
    for name, f in model.model_fields.items():
        if f.exclude or (note and name == "kind"):
            continue
        path = f"{prefix}{name}"
        out.append(field_row(path, f, note))
        subs = [m for m in models_in(f.annotation) if not m.__name__.endswith("Timetable")]
        sub_prefix = f"{path}[]." if typing.get_origin(f.annotation) is list else f"{path}."
        kinds = [kind_of(m) for m in subs]
        if len(subs) > 1 and all(kinds):
            out.append(f"| `{sub_prefix}kind` | one of " + ", ".join(f"`{k}`" for k in kinds) + " | - | - | - | - |")
            for m, k in zip(subs, kinds):
                out += rows(m, sub_prefix, f"(kind {k}) ")
        else:
            for m in subs:
                out += rows(m, sub_prefix, note)
    return out


def section(title: str, intro: str, body: list[str]) -> list[str]:
    return [f"## {title}", "", *([intro, ""] if intro else []), *HEADER, *body, ""]


def _preamble(title: str, what: str) -> list[str]:
    return [
        f"# {title}",
        "",
        f"Generated by `{COMMAND}` from {what}: do not edit by hand (a test regenerates this page and "
        "compares). Every source is quoted with its figures in [docs/sources.md](../sources.md); "
        '"assumption" marks a value no source backs, "project choice" a setting of the study.',
        "",
    ]


def scenario_blocks() -> list[str]:
    """The scenario's top-level fields, then one section per block (fleet, engine, ...)."""
    from wadiloco.models.spec.scenario import Scenario

    top, blocks = [], []
    for name, f in Scenario.model_fields.items():
        if f.exclude:
            continue
        subs = [m for m in models_in(f.annotation) if not m.__name__.endswith("Timetable")]
        if not subs:
            top.append(field_row(name, f))
            continue
        meaning, _, source = split_description(f.description)
        intro = " ".join((subs[0].__doc__ or meaning).split())
        intro += (" Off unless set (default `null`)." if f.default is None else "") + f" Source: {source}."
        blocks += section(f"`{name}`", intro, rows(subs[0], f"{name}."))
    return section("Top level", "", top) + blocks


def timetables() -> list[str]:
    from wadiloco.models.spec import scenario as s

    out = [
        "## Timetables (`kind:`)",
        "",
        "A timetable switches something on and off in simulated time (`cotenant.timetable`, "
        "`testbed_labels.sync`, `testbed_labels.pressure`); its `kind` selects one of these.",
        "",
    ]
    kinds = (s.PeriodicTimetable, s.PressureTimetable, s.BurstyTimetable, s.WindowsTimetable)
    for m in (*kinds, s.MergesTimetable, s.NoTimetable, s.UnionTimetable):
        kind = typing.get_args(m.model_fields["kind"].annotation)[0]
        out += [f"### `kind: {kind}`", "", " ".join((m.__doc__ or "").split()), "", *HEADER]
        out += rows(m, "") + [""]
    return out


def registry(title: str, intro: str, prefix: str, entries: list[tuple[str, str, type[BaseModel]]]) -> list[str]:
    """One subsection per registered name: its summary and its parameters' rows."""
    out = [f"## {title}", "", intro, ""]
    for name, summary, params in entries:
        out += [f"### `{name}`", "", " ".join(summary.split()), ""]
        body = rows(params, prefix) if params.model_fields else []
        out += [*HEADER, *body, ""] if body else ["No parameters.", ""]
    return out


def _ours(obj: type) -> bool:
    return obj.__module__.startswith("wadiloco.")


def plugin_sections() -> list[str]:
    from wadiloco.models.policies import POLICIES
    from wadiloco.models.routers import ROUTERS
    from wadiloco.models.workload.kinds import WORKLOADS

    # The project's own registrations only: a plugin or a test may have registered more in this process.
    kinds = [(n, k.doc.split("\n\n")[0], k.params) for n, k in sorted(WORKLOADS.items()) if _ours(k.params)]
    pols = [(n, c.summary, c.Params) for n, c in sorted(POLICIES.items()) if _ours(c)]
    routers = [(n, c.summary, c.Params) for n, c in sorted(ROUTERS.items()) if _ours(c)]
    return [
        *registry(
            "Workload kinds (`workload.kind`)",
            "`workload:` holds `kind` and that kind's parameters (`wadiloco show` prints them filled in).",
            "workload.",
            kinds,
        ),
        *registry(
            "Merge policies (`policy.name`)",
            "`policy.params` holds the chosen policy's parameters (`wadiloco policies` lists them).",
            "policy.params.",
            pols,
        ),
        *registry(
            "Routers (`router.name`)",
            "`router.params` holds the chosen router's parameters (`wadiloco routers` lists them).",
            "router.params.",
            routers,
        ),
    ]


def scenario_page() -> str:
    lines = _preamble(
        "Scenario reference",
        "the scenario schema (models/spec/scenario.py) and the registries of workload kinds, merge "
        "policies and routers",
    )
    lines += [
        "Every field a scenario YAML may set, by its dotted path; `--set PATH=VALUE` changes one from "
        "the command line and `wadiloco show SCENARIO` prints a scenario with every default filled in. "
        "Bandwidths are in Gb/s (gigabits per second), sizes in bytes, times in seconds.",
        "",
    ]
    lines += scenario_blocks() + timetables() + plugin_sections()
    return "\n".join(lines).rstrip("\n") + "\n"


def sweep_page() -> str:
    from wadiloco.experiments.sweep.spec import SweepSpec

    intro = (
        "A `regimes` entry is a path, or a mapping with the fields `regimes[].*`; `seeds` is a count or a "
        "list. How the entries expand into arms and runs: experiments/sweep/plan.py; the protocol they are "
        "judged by: [docs/model.md](../model.md), section 5. Example: experiments/smoke.yaml. An entry with a "
        "`product` stands for one regime per combination of its axes' levels, named by joining the levels' "
        "names with `__`: `product: {design: {v1: {}, v0: {engine.step: sequential}}, workload: {bursty: "
        "../scenarios/bursty.yaml, aperiodic: ../scenarios/aperiodic.yaml}}` gives v1__bursty, v1__aperiodic, "
        "v0__bursty and v0__aperiodic, each with the entry's `overrides` and then its levels' (a later axis wins); "
        "its `group` lets `policies[].regimes` name them all at once. Example: experiments/atlas.yaml (YAML "
        "anchors, `&name` and `*name`, write an axis once for several entries)."
    )
    lines = _preamble("Sweep file reference", "the sweep schema (experiments/sweep/spec.py)")
    lines += section("Fields", intro, rows(SweepSpec, ""))
    return "\n".join(lines).rstrip("\n") + "\n"


def pages() -> dict[str, str]:
    return {"scenario.md": scenario_page(), "sweep.md": sweep_page()}


def stale(out: Path) -> list[str]:
    """The pages under `out` that differ from what the schemas give now."""
    return [n for n, text in pages().items() if not (out / n).is_file() or (out / n).read_text("utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DOCS_REFERENCE), help="folder of the pages (default: docs/reference)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.check:
        bad = stale(out)
        for n in bad:
            sys.stderr.write(f"stale: {out / n}; regenerate with `{COMMAND}`\n")
        return 1 if bad else 0
    from wadiloco.experiments.output import write_atomic

    out.mkdir(parents=True, exist_ok=True)
    for n, text in pages().items():
        write_atomic(out / n, text.encode())
        sys.stderr.write(f"wrote {out / n}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
