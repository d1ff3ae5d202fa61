"""The reliability classes a red-team pass found, below the command line (the command-line cases are
tests/bad_inputs/14-16): the one reader's strict numbers, errors that survive pickling, worker pools
that never outlive their command, profiles checked for physical sense, the sweep identity of
plugin modules, and a run without requests reported as having no rate."""

from __future__ import annotations

import math
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from wadiloco.models.errors import InputError
from wadiloco.models.spec import files

# ---- the one reader ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, where, why",
    [
        ("1.5\nnan\n", "line 2", "not a decimal number"),
        ("1.5\n1e999\n", "line 2", "finite"),
        ("-1\n", "line 1", "out of range"),
        ("1_000\n", "line 1", "not a decimal number"),
        ("s3cr3tpassw0rd\n", "line 1", "a text of 14 character(s)"),
    ],
)
def test_number_lines_are_strict_and_never_quote(tmp_path, text, where, why):
    p = tmp_path / "w.txt"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        files.number_lines(p, "start", 0.0, 1e9)
    assert e.value.where == where and why in e.value.message and "s3cr3t" not in str(e.value)


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"ts_ms": NaN, "event": "merged"}', "ts_ms: must be a number (got NaN)"),
        ('{"ts_ms": -Infinity, "event": "merged"}', "ts_ms: must be a number (got -Infinity)"),
        ('{"ts_ms": 1' + "0" * 400 + ', "event": "merged"}', "(got an integer of 401 digits)"),
        ('{"ts_ms": true, "event": "merged"}', "(got a boolean)"),
        ('{"ts_ms": "s3cr3tpassw0rd", "event": "merged"}', "(got a text of 14 character(s))"),
        ('["s3cr3tpassw0rd"]', "expected a JSON object (got a JSON list)"),
    ],
)
def test_coordinator_logs_are_strict_and_never_quote(tmp_path, line, why):
    from wadiloco.models.timetables import load_trace

    p = tmp_path / "coordinator.jsonl"
    p.write_text('{"ts_ms": 0, "event": "coordinator_start"}\n' + line + "\n")
    with pytest.raises(InputError) as e:
        load_trace(p)
    assert e.value.where == "line 2" and why in e.value.message and "s3cr3t" not in str(e.value)


def test_json_text_keeps_what_no_number_is_as_a_value_every_check_refuses(tmp_path):
    doc = files.json_text('{"a": NaN, "b": 1' + "0" * 400 + ', "c": 10}', tmp_path / "x.json")
    assert isinstance(doc["a"], files.Unreadable) and files.describe(doc["a"]) == "NaN"
    assert files.describe(doc["b"]) == "an integer of 401 digits" and doc["c"] == 10
    with pytest.raises(InputError, match="not valid JSON"):
        files.json_text("{s3cr3t", tmp_path / "x.json")


@pytest.mark.parametrize("v", [True, "1", math.nan, math.inf, 10**400, None, [1]])
def test_strict_number_refuses_everything_but_finite_numbers(v):
    x, why = files.strict_number(v, 0, 1e9)
    assert x is None and why and repr(v)[:20] not in why


def test_strict_number_range():
    assert files.strict_number(5, 0, 10) == (5.0, "")
    assert files.strict_number(11, 0, 10)[1].startswith("is out of range")


# ---- errors across processes ---------------------------------------------------------------------


def test_an_input_error_survives_pickling():
    e = pickle.loads(pickle.dumps(InputError("s.yaml", "fleet.islands", "must be at least 1")))
    assert (e.file, e.where, e.message) == ("s.yaml", "fleet.islands", "must be at least 1")
    assert str(e) == "s.yaml: fleet.islands: must be at least 1"


POOL_CHILD = """
import os, sys, time
from wadiloco.experiments.sweep.backends import process_pool

def nap(s):
    time.sleep(s)
    return os.getpid()

if __name__ == "__main__":
    with process_pool(2) as ex:
        quick = ex.submit(nap, 0.0)
        slow = ex.submit(nap, 120.0)
        quick.result()  # one worker idles from here (blocked on the pool's queue), the other sleeps
        print(" ".join(str(p.pid) for p in ex._processes.values()), flush=True)
        if sys.argv[1] == "raise":
            raise RuntimeError("the parent fails while a task runs")
        time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie has exited


def _wait_gone(pids: list[int], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _child(tmp_path, how: str):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(POOL_CHILD))
    p = subprocess.Popen([sys.executable, str(script), how], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = [int(x) for x in p.stdout.readline().split()]
    assert len(pids) == 2, p.stderr.read()
    return p, pids


def test_a_pool_dies_with_its_parent_even_when_idle(tmp_path):
    """Parent killed (SIGKILL: no clean-up runs) while one worker sleeps and one waits for work: a
    plain ProcessPoolExecutor's waiting worker never sees the queue close (its siblings hold it) and
    waits forever, parented to init; these notice the parent is gone and exit."""
    p, pids = _child(tmp_path, "kill")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    try:
        assert _wait_gone(pids, 20), "workers outlived their parent"
    finally:
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_failing_parent_kills_its_pool_at_once(tmp_path):
    """An error in the parent (or a stop, a time-out) kills the workers, never waits for their tasks."""
    p, pids = _child(tmp_path, "raise")
    t0 = time.monotonic()
    p.wait(timeout=60)
    assert p.returncode != 0 and "the parent fails" in p.stderr.read()
    assert _wait_gone(pids, 10) and time.monotonic() - t0 < 30


# ---- profiles --------------------------------------------------------------------------------------


def _profile(**edit) -> dict:
    from wadiloco.models.engine.profiles import profile_path

    data = yaml.safe_load(profile_path("b200_vllm0102_eager").read_text())
    data.update(edit)
    return data


def test_a_profile_whose_slope_makes_times_negative_is_refused_naming_the_scale():
    from wadiloco.models.engine.profiles import ProfileSpec, fit_profile

    with pytest.raises(InputError) as e:
        fit_profile(ProfileSpec.model_validate(_profile(batch_slope_scale=100.0)), "mine.yaml")
    assert (e.value.file, e.value.where) == ("mine.yaml", "batch_slope_scale") and "below" in e.value.message
    fit_profile(ProfileSpec.model_validate(_profile(batch_slope_scale=2.0)), "mine.yaml")  # the sensitivity row's


def test_a_profile_that_gets_faster_with_the_batch_is_refused():
    from wadiloco.models.engine.profiles import ProfileSpec, fit_profile

    spec = _profile(batch_slope={"runs": ["vllm-1p5b-medium", "vllm-1p5b-sync-heavy"]})
    with pytest.raises(InputError) as e:
        fit_profile(ProfileSpec.model_validate(spec), "mine.yaml")
    assert e.value.where == "batch_slope.runs" and "negative" in e.value.message


def test_every_packaged_profile_is_physical():
    from wadiloco.models.engine.profiles import load_profile, packaged_profiles

    for name in packaged_profiles():
        for m in load_profile(name).models.values():
            assert m.a > 0 and m.d >= 0 and m.iteration_s(1) > 0


# ---- the sweep's identity ----------------------------------------------------------------------------


def test_a_plugin_named_as_a_module_is_part_of_the_identity(tmp_path, monkeypatch):
    from wadiloco.experiments.sweep.plan import input_digests
    from wadiloco.models.spec.load import scenario_from_dict

    (tmp_path / "wadiloco_probe_plugin").mkdir()
    mod = tmp_path / "wadiloco_probe_plugin" / "__init__.py"
    mod.write_text("VERSION = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sc = scenario_from_dict({"name": "x", "horizon_s": 5}, "s.yaml", tmp_path)
    before = input_digests([sc], ("wadiloco_probe_plugin",))
    assert str(mod.resolve()) in before
    mod.write_text("VERSION = 2\n")
    assert input_digests([sc], ("wadiloco_probe_plugin",)) != before


def test_a_file_named_in_policy_params_is_part_of_the_identity(tmp_path):
    from wadiloco.experiments.sweep.plan import input_digests
    from wadiloco.models.spec.load import scenario_from_dict

    (tmp_path / "sched.txt").write_text("1\n")
    sc = scenario_from_dict({"name": "x", "horizon_s": 5}, tmp_path / "s.yaml", tmp_path)
    got = input_digests([sc], (), [{"file": "sched.txt"}])
    assert str((tmp_path / "sched.txt").resolve()) in got


# ---- a run without requests -------------------------------------------------------------------------


def test_a_run_without_requests_has_no_violation_rate():
    from wadiloco.experiments.commands import format_summary
    from wadiloco.experiments.runner import run_one
    from wadiloco.models.spec.load import scenario_from_dict

    sc = scenario_from_dict({"name": "x", "horizon_s": 0.001, "drain_s": 0.0}, "s.yaml", ".")
    s = run_one(sc, 0).record()
    assert s["requests"] == 0 and s["slo_violation_rate"] is None
    text = format_summary(s, 0.001, 0.0)
    assert "no requests" in text and "0.00%" not in text
