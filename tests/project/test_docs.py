"""The documents hold to the code: the reference pages are what the schemas generate, every field is
described, the README's commands parse and its links resolve, and no page speaks of how the project
was built."""

from __future__ import annotations

import argparse
import importlib.util
import re
import typing
from pathlib import Path

import pytest
import yaml

from wadiloco.experiments import reference
from wadiloco.experiments.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
# docs/paper/ is the paper sweep's own report, copied as generated (its links point into the sweep's folder).
PROSE = [p for p in PAGES if p.parent.name != "paper"]
# Two commands that work on a fresh machine; .ci/run runs the second.
SETUP_RUN = "python3 -m venv .venv && . .venv/bin/activate && pip install . && wadiloco run scenarios/bursty.yaml"
SETUP_TEST = 'python3 -m venv .venv && . .venv/bin/activate && pip install ".[test]" && python -m pytest -q -n 2 tests'
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _fences(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _commands(text: str) -> list[str]:
    """The shell commands of a page's ```bash blocks, comments cut, one per line."""
    lines = (ln.split("  #")[0].strip() for block in _fences(text, "bash") for ln in block.splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_reference_pages_are_current():
    stale = reference.stale(ROOT / "docs" / "reference")
    assert not stale, f"stale reference page(s) {stale}: regenerate with `{reference.COMMAND}`"


def test_reference_pages_ignore_registrations_from_outside_the_project():
    from pydantic import BaseModel

    from wadiloco.models.workload import kinds

    class Params(BaseModel):
        kind: str = "docs_probe"

    before = reference.scenario_page()
    kinds._register(kinds.WorkloadKind("docs_probe", Params, lambda p, ctx: [], "A test's kind."))
    try:
        assert reference.scenario_page() == before
    finally:
        del kinds.WORKLOADS["docs_probe"]


def test_a_stale_reference_page_is_named(tmp_path):
    assert reference.main(["--out", str(tmp_path)]) == 0
    assert reference.stale(tmp_path) == []
    (tmp_path / "sweep.md").write_text("old\n", encoding="utf-8")
    assert reference.stale(tmp_path) == ["sweep.md"]
    assert reference.main(["--out", str(tmp_path), "--check"]) == 1


def _described_models() -> list[type]:
    from wadiloco.experiments.sweep import spec
    from wadiloco.models.spec import scenario

    seen: list[type] = []
    todo = [
        scenario.Scenario,
        spec.SweepSpec,
        *(getattr(scenario, n) for n in dir(scenario) if n.endswith("Timetable")),
    ]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.append(m)
            todo += [s for f in m.model_fields.values() for s in reference.models_in(f.annotation)]
    return seen


def _numeric(ann) -> bool:
    """A number, or a number or null (a list of numbers is a list)."""
    kinds = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) else [ann]
    return len(kinds) == 1 and kinds[0] in (int, float)


def test_every_scenario_and_sweep_field_has_a_meaning_a_source_and_a_unit_where_it_has_one():
    models = _described_models()
    assert len(models) > 15  # the scenario's blocks, timetables, the sweep's parts
    for m in models:
        for name, f in m.model_fields.items():
            if f.exclude:
                continue
            meaning, unit, source = reference.split_description(f.description)
            where = f"{m.__name__}.{name}"
            assert meaning and source, f"{where}: describe it as 'meaning. Unit: U. Source: S.'"
            if _numeric(f.annotation) and name not in ("seed", "timeline_seed"):
                assert unit, f"{where}: a number needs its unit ('Unit: ...')"


# What a field's source may name besides a section of docs/sources.md: nothing outside the repository.
LOCAL_SOURCES = (
    "assumption",
    "project choice",
    "a scheduling choice",
    "the scenario",
    "the sweep",
    "the policy",
    "the router",
    "the simulator's design",
    "the profile's own data",
    "docs/",
)


def test_every_source_is_a_section_of_sources_md_or_says_it_has_none():
    sections = re.findall(r"^## (.+)$", (DOCS / "sources.md").read_text(encoding="utf-8"), flags=re.M)
    known = tuple(h.lower() for h in sections) + LOCAL_SOURCES
    assert "design card" in known and "h200 calibration" in known
    for m in _described_models():
        for name, f in m.model_fields.items():
            source = reference.split_description(f.description)[2]
            if not f.exclude:
                assert source.lower().startswith(known), f"{m.__name__}.{name}: source {source!r} is not in sources.md"


def test_the_description_convention_is_read_back():
    assert reference.split_description("NIC bandwidth. Unit: Gb/s. Source: design card.") == (
        "NIC bandwidth.",
        "Gb/s",
        "design card",
    )
    assert reference.split_description("A choice. Source: the scenario.") == ("A choice.", "", "the scenario")
    assert reference.number(1e9) == "1e9" and reference.number(0.0049) == "0.0049" and reference.number(256) == "256"


def test_readme_is_short_and_keeps_its_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220
    commands = _commands(text)
    assert commands[:2] == [SETUP_RUN, SETUP_TEST]
    assert SETUP_TEST.split(" && ")[-1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PROSE, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)}: link to {target} resolves to nothing"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _check_wadiloco(argv: list[str]) -> None:
    sub = _subcommands()
    assert argv[0] in sub, f"wadiloco {argv[0]}: no such command"
    sub[argv[0]].parse_args(argv[1:])  # SystemExit on an unknown flag


def test_readme_commands_parse_and_name_files_that_exist():
    text = README.read_text(encoding="utf-8")
    checked = 0
    for line in _commands(text)[2:]:
        argv = line.split()
        if argv[0] == "wadiloco":
            _check_wadiloco(argv[1:])
        elif argv[:2] == ["python", "-m"]:
            assert importlib.util.find_spec(argv[2]) is not None, line
        for word in argv:
            if re.match(r"(scenarios|experiments)/\S+\.yaml$", word):
                assert (ROOT / word).is_file(), f"{line}: {word} does not exist"
        checked += 1
    assert checked >= 5
    for cmd in re.findall(r"`(wadiloco [a-z]+)\b", text):
        assert cmd.split()[1] in _subcommands(), f"README names `{cmd}`, which the CLI does not have"


def _has_field(path: str) -> bool:
    """Whether a dotted scenario path names a field (workload.* in any registered kind's parameters)."""
    from wadiloco.models.spec.scenario import Scenario
    from wadiloco.models.workload.kinds import WORKLOADS

    head, _, rest = path.partition(".")
    if head == "workload":
        return rest == "kind" or any(rest in k.params.model_fields for k in WORKLOADS.values())
    model = Scenario
    for part in path.split("."):
        f = model.model_fields.get(part) if model is not None else None
        if f is None:
            return False
        subs = reference.models_in(f.annotation)
        model = subs[0] if subs else None
    return True


def test_readme_names_only_fields_that_exist():
    named = re.findall(
        r"`((?:fleet|engine|merge|training|slo|workload|policy|router|monitor)\.[a-z_.]+)`", README.read_text()
    )
    assert len(named) > 20
    missing = [p for p in named if not _has_field(p)]
    assert not missing, f"README names fields the schema does not have: {missing}"
    assert not _has_field("fleet.no_such_field") and not _has_field("workload.no_such_param")


def test_readme_example_fleet_is_a_valid_scenario(tmp_path):
    from wadiloco.models.spec.load import load_scenario

    (block,) = _fences(README.read_text(encoding="utf-8"), "yaml")
    path = tmp_path / "my_fleet.yaml"
    path.write_text(block, encoding="utf-8")
    sc = load_scenario(path)
    assert sc.name == "my_fleet" and yaml.safe_load(block)["fleet"]["islands"] == sc.fleet.islands


# How the project was built is not the project's subject: no work sessions, rounds or issue numbers.
# (A sweep's provenance has `sessions`, its invocations, which its generated report lists.)
BUILD_TALK = re.compile(
    r"\bsessions? \d|\b(this|that|last|next) (session|round)\b|\bround \d|\bissues? #?\d|\bissue-\d|#\d{1,3}\b",
    re.I,
)
OUTSIDE = re.compile(r"SPEC\.md|REFERENCES\.md|paper_testbed\.md|PERFORMANCE_NOTES|calibration/README")


@pytest.mark.parametrize("page", PROSE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_speak_of_the_project_not_of_its_making(page):
    text = page.read_text(encoding="utf-8")
    said = [m.group(0) for m in BUILD_TALK.finditer(text)]
    assert not said, f"{page.relative_to(ROOT)} speaks of how the project was built: {said}"
    assert not OUTSIDE.findall(text), f"{page.relative_to(ROOT)} cites a file outside the repository"


def test_generated_tables_live_in_their_pages_once():
    from wadiloco.experiments.studies import atlas_table, paper_table, testbed_table

    for module, page in ((paper_table, "paper_study.md"), (atlas_table, "atlas.md"), (testbed_table, "testbed.md")):
        text = (DOCS / page).read_text(encoding="utf-8")
        assert text.count(module.START) == 1 and text.count(module.END) == 1, page
        assert module.START not in README.read_text(encoding="utf-8")


def _sources() -> list[Path]:
    tops = ("models", "sim", "experiments", "benchmarks", "tests", "scenarios", "notebooks")
    files = [p for t in tops for p in sorted((ROOT / t).rglob("*")) if p.suffix in {".py", ".yaml", ".ipynb", ".md"}]
    return [ROOT / "setup.py", ROOT / "setup.cfg", *(p for p in files if p != Path(__file__).resolve())]


# In code "round" and "session" are domain words (a water-filling round, a sweep's sessions): the code's
# rule is no issue numbers, and no citation of a file outside the repository.
CODE_TALK = re.compile(r"\bissues? #?\d|\bissue-\d", re.I)


def test_code_speaks_of_the_project_and_cites_what_the_repository_holds():
    """A test that reads the shared data folder's own files (`shared_dir / ...`) reads data, not cites it."""
    bad = []
    for p in _sources():
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            cited = OUTSIDE.search(line) and "shared_dir" not in line and "$WADILOCO_SHARED" not in line
            if CODE_TALK.search(line) or cited:
                bad.append(f"{p.relative_to(ROOT)}:{n}")
    assert not bad, f"build talk or a citation of a file outside the repository: {bad[:20]}"


TEST_REF = re.compile(r"(tests/[a-z_/]+\.py)((?:::[A-Za-z_0-9]+)?)|`::([A-Za-z_0-9]+)")


@pytest.mark.parametrize("page", PROSE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_tests_a_page_names_exist(page):
    """`tests/x/test_y.py::name` and the `::name` that follow it name a test file and a function in it."""
    missing, current = [], None
    for m in TEST_REF.finditer(page.read_text(encoding="utf-8")):
        path, name = (m.group(1), m.group(2)[2:]) if m.group(1) else (current, m.group(3))
        if path is None:
            continue
        current = path
        if not (ROOT / path).is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\b", (ROOT / path).read_text(), flags=re.M):
            missing.append(f"{path}::{name}")
    assert not missing, f"{page.relative_to(ROOT)} names tests that do not exist: {missing}"
