"""Plug-ins (models.plugins): the testbed twin registers itself into the core's registries.

- importing the core imports no plug-in; the first read of a registry loads the packaged ones, and
  the twin's registrations are all there (prompt sets, the `pressure` timetable, the
  `testbed_labels:` block, the Stage 10 measurements, the `replay` policy);
- a registry loads plug-ins once, a read while they load sees what is registered so far, and a
  plug-in that fails to import fails the read, again on the next one;
- what a scenario names from a plug-in that is not there is an input error naming the field,
  through the real command line (the import-graph check is tests/project/test_imports.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml

from wadiloco.experiments.cli import main
from wadiloco.models import plugins
from wadiloco.models.cotenant import TIMETABLES
from wadiloco.models.engine.profiles import MEASUREMENTS
from wadiloco.models.plugins import Registry
from wadiloco.models.policies import POLICIES
from wadiloco.models.results.blocks import RESULT_BLOCKS
from wadiloco.models.workload.prompt_sets import PROMPT_SETS

CORE_ONLY = textwrap.dedent(
    """
    import sys
    import wadiloco.experiments.runner, wadiloco.sim.fleet, wadiloco.models.spec.resolve
    print(sorted(m for m in sys.modules if ".testbed" in m))
    from wadiloco.models.policies import POLICIES
    print("replay" in POLICIES, "wadiloco.models.testbed.plugin" in sys.modules)
    """
)


def test_the_core_imports_no_plugin_until_a_registry_is_read():
    out = subprocess.run([sys.executable, "-c", CORE_ONLY], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True True"]


def test_the_testbed_registers_what_it_adds():
    assert plugins.packaged() == ["testbed"]
    assert {"short", "mixed", "long"} <= set(PROMPT_SETS)
    assert PROMPT_SETS["mixed"].tokens == (13, 50, 250, 400) and PROMPT_SETS["mixed"].chars == (78, 311, 1397, 2201)
    assert {"periodic", "bursty", "pressure"} <= set(TIMETABLES)
    assert "testbed_labels" in RESULT_BLOCKS and "testbed/stage10.yaml" in MEASUREMENTS
    assert POLICIES["replay"].__module__ == "wadiloco.models.testbed.replay"


@pytest.fixture
def fake_plugins(tmp_path, monkeypatch):
    """A package `fakeplugins` with plug-ins `a` (registers into REG, reading it while it does) and,
    if the test writes one, others; packaged plug-ins are looked up there, from an unloaded state."""
    root = tmp_path / "fakeplugins"
    (root / "a").mkdir(parents=True)
    (root / "__init__.py").write_text("from wadiloco.models.plugins import Registry\nREG = Registry('thing')\n")
    (root / "a" / "plugin.py").write_text(
        "from fakeplugins import REG\nREG['x'] = 1\nassert 'x' in REG and len(REG) == 1\nREG['y'] = 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "PACKAGE", "fakeplugins")
    monkeypatch.setitem(plugins._state, "loaded", False)
    for name in [m for m in sys.modules if m.startswith("fakeplugins")]:
        monkeypatch.delitem(sys.modules, name)
    return root


def test_a_registry_loads_the_plugins_once_before_its_first_read(fake_plugins):
    import fakeplugins

    assert plugins.packaged() == ["a"]
    assert dict(fakeplugins.REG) == {"x": 1, "y": 2} and plugins._state["loaded"]
    fakeplugins.REG["z"] = 3  # a later registration is not undone by a second load
    assert sorted(fakeplugins.REG) == ["x", "y", "z"] and fakeplugins.REG.known() == "x, y, z"


def test_a_plugin_that_fails_fails_the_read_every_time(fake_plugins):
    (fake_plugins / "b").mkdir()
    (fake_plugins / "b" / "plugin.py").write_text("raise RuntimeError('broken plug-in')\n")
    import fakeplugins

    for _ in range(2):
        with pytest.raises(RuntimeError, match="broken plug-in"):
            _ = "x" in fakeplugins.REG
    assert not plugins._state["loaded"] and not plugins._state["loading"]


def test_writing_a_registry_loads_nothing(monkeypatch):
    monkeypatch.setitem(plugins._state, "loaded", False)
    monkeypatch.setattr(plugins, "packaged", lambda: pytest.fail("a write loaded the plug-ins"))
    reg = Registry("thing")
    reg["a"] = 1
    del reg["a"]
    assert "thing" in repr(reg)


CLOSED = {
    "name": "closed",
    "horizon_s": 30,
    "workload": {"kind": "closed_loop", "concurrency": {"kind": "steady", "c": 2}, "prompts": "mixed"},
    "merge": {"phases": []},
    "policy": {"name": "no_sync"},
}


def _cli_error(tmp_path, capsys, doc) -> tuple[int, str, object]:
    p = tmp_path / "scenario.yaml"
    p.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    rc = main(["run", str(p), "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and not out.exists(), err
    return rc, err, p


def test_an_unknown_prompt_set_names_the_field(tmp_path, capsys):
    doc = {**CLOSED, "workload": {**CLOSED["workload"], "prompts": "huge"}}
    rc, err, p = _cli_error(tmp_path, capsys, doc)
    assert rc == 2 and str(p) in err and "workload.prompts" in err and "long, mixed, short" in err


def test_a_per_slot_output_list_has_the_prompt_sets_slots(tmp_path, capsys):
    doc = {**CLOSED, "workload": {**CLOSED["workload"], "output_tokens": [32, 32, 22]}}
    rc, err, _ = _cli_error(tmp_path, capsys, doc)
    assert rc == 2 and "needs 4 values" in err


def test_what_a_missing_plugin_would_register_is_an_input_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delitem(RESULT_BLOCKS, "testbed_labels")
    monkeypatch.delitem(TIMETABLES, "pressure")
    rc, err, p = _cli_error(tmp_path, capsys, {**CLOSED, "testbed_labels": {"sync": {"kind": "none"}}})
    assert rc == 2 and str(p) in err and "testbed_labels" in err and "no plug-in resolves" in err
    doc = {**CLOSED, "cotenant": {"weight": 0.5, "timetable": {"kind": "pressure", "period_s": 90}}}
    rc, err, p = _cli_error(tmp_path, capsys, doc)
    assert rc == 2 and "cotenant.timetable.kind" in err and "'pressure'" in err
