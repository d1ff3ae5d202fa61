"""Every notebook in notebooks/ runs top to bottom without errors (at the small sizes it ships with),
and every cell meant to draw shows its figure.

A cell is meant to draw when it carries the cell tag `figure`; a code cell that calls a plotting
entry point (`plt.subplots`, `plt.show`, `display(Image(...))`, a seaborn `*plot`) must carry it, so a
new plot cannot slip past the check untagged. The executed notebook must then hold an `image/png`
output for each such cell: a figure drawn on a non-interactive backend (`matplotlib.use("Agg")`)
executes cleanly but shows nothing, and fails here.

The notebooks are committed with their outputs so that they read on a repository page;
`python -m pytest tests/project/test_notebooks.py -m "" --update-notebooks` re-executes them and writes the
outputs back (notebooks/README.md). Notebooks 01 and 03 read result folders shipped in
notebooks/results/ (`bash notebooks/regenerate_results.sh` makes them): the shipped runs must be
the sweep file's, and notebook 01 re-runs one of them and fails if it no longer gives the same number.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
FIGURE_TAG = "figure"
DRAWS = re.compile(r"plt\.(subplots|figure|show)\(|display\(\s*Image\(|sns\.\w*plot\(")


def execute(path: Path, timeout: int = 300) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}}).execute()
    return nb


def figure_problems(nb: nbformat.NotebookNode) -> list[str]:
    """What is wrong with an executed notebook's figures: cells that draw without the `figure`
    tag, and tagged cells with no image among their outputs."""
    problems = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        tagged = FIGURE_TAG in c.metadata.get("tags", [])
        if DRAWS.search(c.source) and not tagged:
            problems.append(f"cell {i} draws but has no '{FIGURE_TAG}' tag")
        images = [o for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
        if tagged and not images:
            problems.append(f"cell {i} is meant to draw but produced no image")
    return problems


def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert {
        "01_quickstart.ipynb",
        "02_calibration_protocol.ipynb",
        "03_capacity_planning.ipynb",
        "04_why_matched_random.ipynb",
    } <= names


def test_figure_check_can_fail():
    """The check fires on a tagged cell without an image and on an untagged cell that draws."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("plt.show()", metadata={"tags": [FIGURE_TAG]}),
        nbformat.v4.new_code_cell("fig, ax = plt.subplots()"),
    ]
    assert figure_problems(nb) == [
        "cell 0 is meant to draw but produced no image",
        "cell 1 draws but has no 'figure' tag",
    ]
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo="})]
    nb.cells[1].metadata["tags"] = [FIGURE_TAG]
    nb.cells[1].outputs = list(nb.cells[0].outputs)
    assert figure_problems(nb) == []


# The two notebooks that run sweeps of their own (about 30 s of CPU together) run under `-m slow`,
# which keeps the default suite under 4 minutes on 2 cores; the quickstart, capacity planning and
# testbed notebooks run in every suite. `-m slow` or `-m ""` executes them all.
SLOW_NOTEBOOKS = {"02_calibration_protocol", "04_why_matched_random"}


def _notebook_param(p: Path):
    return pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in SLOW_NOTEBOOKS else [])


@pytest.mark.parametrize("path", [_notebook_param(p) for p in NOTEBOOKS])
def test_notebook_runs(path, request):
    nb = execute(path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert not figure_problems(nb), f"{path.name}: " + "; ".join(figure_problems(nb))
    if request.config.getoption("--update-notebooks"):
        nbformat.write(nb, path)


def test_shipped_results_are_the_sweeps_and_say_what_made_them():
    """notebooks/results/01_designs holds every run of sweeps/01_designs.yaml as it is today (a
    scenario or sweep edit that changes what runs changes the hashes), with its provenance; each
    whatif folder of notebook 03 has its table and its provenance."""
    import pandas as pd

    from wadiloco.experiments.sweep import load_sweep

    plan = load_sweep(NB_DIR / "sweeps" / "01_designs.yaml")
    res = NB_DIR / "results" / "01_designs"
    runs = pd.read_csv(res / "runs.csv")
    assert len(runs) == plan.expected_runs() and (runs["status"] == "ok").all()
    shipped = runs.groupby("regime")["scenario_hash"].unique().map(list).to_dict()
    assert shipped == {r.name: [r.digest] for r in plan.regimes}
    prov = json.loads((res / "provenance.json").read_text())
    assert [r["scenario_hash"] for r in prov["regimes"]] == [r.digest for r in plan.regimes]
    assert prov["version"] and prov["sessions"]
    for d in sorted((NB_DIR / "results" / "03_whatif").iterdir()):
        table = pd.read_csv(d / "whatif.csv")
        assert len(table) >= 2 and table["merges_min"].min() >= 2, d.name  # every answer rests on merges
        assert json.loads((d / "whatif.json").read_text())["provenance"]["version"], d.name
