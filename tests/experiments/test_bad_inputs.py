"""The bad-input corpus: every case must exit 2 with one paragraph naming the file and the field
(or line), no traceback, and no output files. Cases are generated from the schema (every field of
every section gets the wrong-type, out-of-range and non-finite values it must refuse), plus broken
YAML, malformed traces and bad command lines."""

from __future__ import annotations

import math
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from wadiloco.experiments.cli import main
from wadiloco.models.spec.load import Scenario

ROOT = Path(__file__).resolve().parents[2]
VALID = {
    "name": "x",
    "horizon_s": 30,
    "workload": {"kind": "normal"},
    "policy": {"name": "fixed", "params": {"H": 256}},
}


def _numeric_bounds(field) -> dict:
    out = {}
    for m in field.metadata:
        for k in ("gt", "ge", "lt", "le"):
            v = getattr(m, k, None)
            if v is not None:
                out[k] = v
    return out


def _bad_values(field) -> list:
    ann = field.annotation
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if ann is bool:
        return ["maybe", [True]]
    if origin is typing.Literal:
        return ["not-a-choice", 3]
    if origin is list:
        return ["not-a-list", ["bogus-item"]]
    if ann in (int, float) or (origin is typing.Union and set(args) <= {int, float, type(None)}):
        b = _numeric_bounds(field)
        vals = ["abc", [1], {"a": 1}, math.nan, math.inf]
        if "gt" in b:
            vals.append(b["gt"])
        if "ge" in b:
            vals.append(b["ge"] - 1)
        if "lt" in b:
            vals.append(b["lt"])
        if "le" in b:
            vals.append(b["le"] + 1)
        if ann is int:
            vals.append(1.5)
        return vals
    if ann is str:
        return [["a", "list"], {"a": 1}]
    return []


def scenario_cases():
    cases = []
    for sec, f in Scenario.model_fields.items():
        if f.exclude:
            continue
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            cases.append((f"{sec}.unknown_key", {sec: {"unknown_key": 1}}, f"{sec}.unknown_key"))
            cases.append((f"{sec}.not_a_mapping", {sec: "text"}, sec))
            for name, sub in ann.model_fields.items():
                for i, v in enumerate(_bad_values(sub)):
                    cases.append((f"{sec}.{name}#{i}", {sec: {name: v}}, f"{sec}.{name}"))
        else:
            for i, v in enumerate(_bad_values(f)):
                cases.append((f"{sec}#{i}", {sec: v}, sec))
    cases += [
        ("top.unknown", {"colour": "red"}, "colour"),
        ("corridor", {"merge": {"h_min": 300, "h_max": 200}}, "h_min"),
        ("workload.kind", {"workload": {"kind": "nope"}}, "workload.kind"),
        ("workload.missing_kind", {"workload": {"load": 0.5}}, "workload"),
        ("workload.load.neg", {"workload": {"kind": "bursty", "load": -1}}, "workload.load"),
        ("workload.load.zero", {"workload": {"kind": "normal", "load": 0}}, "workload.load"),
        ("workload.period", {"workload": {"kind": "bursty", "period_s": 0}}, "workload.period_s"),
        ("workload.on_fraction", {"workload": {"kind": "bursty", "on_fraction": 1.5}}, "workload.on_fraction"),
        ("workload.trace.missing", {"workload": {"kind": "trace", "path": "nope.csv"}}, "workload.path"),
        ("workload.trace.nopath", {"workload": {"kind": "trace"}}, "workload.path"),
        ("policy.unknown", {"policy": {"name": "magic"}}, "policy.name"),
        ("policy.param.unknown", {"policy": {"name": "fixed", "params": {"HH": 1}}}, "policy.params.HH"),
        ("policy.param.neg", {"policy": {"name": "fixed", "params": {"H": -1}}}, "policy.params.H"),
        ("policy.params.list", {"policy": {"name": "fixed", "params": [1, 2]}}, "policy.params"),
        ("fleet.empty", {"fleet": {"islands": 0}}, "fleet.islands"),
        ("slo.zero", {"slo": {"ttft_s": 0}}, "slo.ttft_s"),
    ]
    return cases


SCENARIO_CASES = scenario_cases()

YAML_CASES = [
    ("unclosed_list", "name: [a, b\n"),
    ("unclosed_map", "fleet: {islands: 2\n"),
    ("bad_indent", "fleet:\n  islands: 2\n hosts_per_island: 2\n"),
    ("tab", "fleet:\n\tislands: 2\n"),
    ("colon_mess", "name: a: b: c\n"),
    ("bad_anchor", "fleet: *nothing\n"),
    ("unterminated_string", "name: 'abc\n"),
    ("list_top", "- a\n- b\n"),
    ("scalar_top", "42\n"),
    ("empty", ""),
    ("only_comment", "# nothing here\n"),
    ("binary_junk", "\x00\x01\x02"),
    ("python_tag", "name: !!python/object:os.system 'echo hi'\n"),
    ("duplicate_doc", "name: a\n---\nname: b\n"),
    ("bad_escape", 'name: "\\q"\n'),
]


def _run_cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse errors
        rc = e.code
    err = capsys.readouterr().err
    return rc, err


def _assert_clean_error(rc, err, *needles):
    assert rc == 2, err
    assert "Traceback" not in err
    text = err.strip()
    assert text and "\n\n" not in text, err  # one paragraph
    for n in needles:
        assert n in err, (n, err)


@pytest.mark.parametrize("case,patch,field", SCENARIO_CASES, ids=[c[0] for c in SCENARIO_CASES])
def test_bad_scenario_field(tmp_path, capsys, case, patch, field):
    doc = {**VALID, **patch}
    p = tmp_path / "scenario.yaml"
    p.write_text(
        yaml.safe_dump(doc)
        if all(isinstance(v, (int, float, str, list, dict, bool)) or v is None for v in doc.values())
        else yaml.dump(doc)
    )
    out = tmp_path / "out"
    rc, err = _run_cli(["run", str(p), "--out", str(out)], capsys)
    _assert_clean_error(rc, err, str(p), field)
    assert not out.exists()


@pytest.mark.parametrize("case,text", YAML_CASES, ids=[c[0] for c in YAML_CASES])
def test_bad_yaml(tmp_path, capsys, case, text):
    p = tmp_path / "scenario.yaml"
    p.write_bytes(text.encode("utf-8", "surrogateescape"))
    rc, err = _run_cli(["run", str(p), "--out", str(tmp_path / "out")], capsys)
    _assert_clean_error(rc, err, str(p))
    assert not (tmp_path / "out").exists()


TRACE_CASES = [
    ("azure_empty", "t.csv", ""),
    ("azure_header_only", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"),
    ("azure_wrong_columns", "t.csv", "time,in,out\n2023-11-16 18:15:46.6805900,1,1\n"),
    ("azure_bad_timestamp", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n"),
    ("azure_negative_tokens", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-5,1\n"),
    ("azure_zero_output", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,5,0\n"),
    ("azure_text_tokens", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,many,1\n"),
    (
        "azure_back_in_time",
        "t.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47.0,1,1\n2023-11-16 18:15:46.0,1,1\n",
    ),
    ("azure_absurd", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,99999999999,1\n"),
    ("azure_missing_field", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,1\n"),
    ("mooncake_empty", "t.jsonl", ""),
    ("mooncake_not_json", "t.jsonl", "{timestamp: 1}\n"),
    ("mooncake_not_object", "t.jsonl", "[1, 2, 3]\n"),
    ("mooncake_missing_key", "t.jsonl", '{"timestamp": 0, "input_length": 5}\n'),
    ("mooncake_negative", "t.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 1}\n'),
    (
        "mooncake_back_in_time",
        "t.jsonl",
        '{"timestamp": 10, "input_length": 5, "output_length": 1}\n'
        '{"timestamp": 5, "input_length": 5, "output_length": 1}\n',
    ),
    ("mooncake_string_len", "t.jsonl", '{"timestamp": 0, "input_length": "5", "output_length": 1}\n'),
    ("mooncake_float_len", "t.jsonl", '{"timestamp": 0, "input_length": 5.5, "output_length": 1}\n'),
    ("mooncake_nan_ts", "t.jsonl", '{"timestamp": NaN, "input_length": 5, "output_length": 1}\n'),
    (
        "mooncake_absurd_span",
        "t.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
        '{"timestamp": 99999999999999, "input_length": 5, "output_length": 1}\n',
    ),
]


@pytest.mark.parametrize("case,name,text", TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
def test_bad_trace_via_trace_command(tmp_path, capsys, case, name, text):
    p = tmp_path / name
    p.write_text(text)
    rc, err = _run_cli(["trace", str(p)], capsys)
    _assert_clean_error(rc, err, str(p))


@pytest.mark.parametrize("case,name,text", TRACE_CASES[:10:3] + TRACE_CASES[10::3], ids=lambda x: str(x)[:24])
def test_bad_trace_via_scenario(tmp_path, capsys, case, name, text):
    (tmp_path / name).write_text(text)
    p = tmp_path / "scenario.yaml"
    p.write_text(yaml.safe_dump({**VALID, "workload": {"kind": "trace", "path": name}}))
    out = tmp_path / "out"
    rc, err = _run_cli(["run", str(p), "--out", str(out)], capsys)
    _assert_clean_error(rc, err, name)
    assert not out.exists()


NORMAL = str(ROOT / "scenarios" / "normal.yaml")
CLI_CASES = [
    ("no_command", [], "command"),
    ("unknown_command", ["fly"], "invalid choice"),
    ("run_no_scenario", ["run"], "scenario"),
    ("missing_scenario", ["run", "/nonexistent.yaml"], "/nonexistent.yaml"),
    ("scenario_is_dir", ["run", str(ROOT / "scenarios")], "folder"),
    ("bad_seed", ["run", NORMAL, "--seed", "x"], "--seed"),
    ("float_seed", ["run", NORMAL, "--seed", "1.5"], "--seed"),
    ("unknown_flag", ["run", NORMAL, "--turbo"], "--turbo"),
    ("unknown_policy", ["run", NORMAL, "--policy", "bogus"], "bogus"),
    ("param_no_equals", ["run", NORMAL, "--param", "H"], "--param"),
    ("param_bad_value", ["run", NORMAL, "--param", "H=-4"], "H"),
    ("param_unknown", ["run", NORMAL, "--param", "Q=4"], "Q"),
    ("param_for_no_params", ["run", NORMAL, "--policy", "no_sync", "--param", "H=128"], "no_sync takes no parameters"),
    ("param_yaml_error", ["run", NORMAL, "--param", "H=[1"], "H"),
    ("calibrate_missing_file", ["calibrate", "--file", "/nope.json"], "/nope.json"),
    ("trace_missing", ["trace", "/nope.csv"], "/nope.csv"),
    ("trace_bad_format", ["trace", NORMAL, "--format", "xml"], "--format"),
    ("capacity_bad_attainment", ["capacity", NORMAL, "--attainment", "1.5"], "--attainment"),
    ("capacity_zero_seeds", ["capacity", NORMAL, "--seeds", "0"], "--seeds"),
    ("capacity_neg_horizon", ["capacity", NORMAL, "--horizon", "-1"], "--horizon"),
    ("whatif_no_vary", ["whatif", NORMAL, "--out", "/tmp/x"], "--vary"),
    ("whatif_bad_vary", ["whatif", NORMAL, "--vary", "fleet.islands", "--out", "/tmp/wx"], "--vary"),
    ("whatif_unknown_path", ["whatif", NORMAL, "--vary", "fleet.nope=1,2", "--out", "/tmp/wx"], "fleet.nope"),
    ("whatif_bad_value", ["whatif", NORMAL, "--vary", "fleet.islands=0,2", "--out", "/tmp/wx"], "fleet.islands"),
]


@pytest.mark.parametrize("case,argv,needle", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_command_line(capsys, case, argv, needle):
    rc, err = _run_cli(argv, capsys)
    assert rc == 2, err
    assert "Traceback" not in err and needle in err, err


def test_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    rc, err = _run_cli(["run", NORMAL, "--out", str(f)], capsys)
    _assert_clean_error(rc, err, str(f))


def test_corpus_size():
    n = len(SCENARIO_CASES) + len(YAML_CASES) + len(TRACE_CASES) + len(CLI_CASES)
    assert n >= 200, n


def test_fixed_interval_outside_corridor(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({**VALID, "policy": {"name": "fixed", "params": {"H": 600}}}))
    rc, err = _run_cli(["run", str(p)], capsys)
    _assert_clean_error(rc, err, str(p), "policy.params", "corridor")
    rc, err = _run_cli(["run", NORMAL, "--param", "H=64"], capsys)
    _assert_clean_error(rc, err, "--policy.params", "corridor")
