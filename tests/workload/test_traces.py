"""Trace loading: the real files, malformed inputs (always InputError, naming file and line) and
round-trips of generated traces."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wadiloco.models.errors import InputError
from wadiloco.models.workload.traces import Trace, describe, load_trace

AZURE = "AzureLLMInferenceTrace_conv_2023.csv"
MOONCAKE = "mooncake_synthetic_trace.jsonl"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _real(shared_dir: Path, name: str) -> Path:
    p = shared_dir / "traces" / name
    if not p.is_file():
        pytest.skip(f"{p} not present")
    return p


def _write(folder: Path, name: str, content: str | bytes) -> Path:
    p = folder / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    p.write_bytes(content)
    return p


# ---------------------------------------------------------------------------------------------
# the real traces


def test_azure_real_trace(shared_dir):
    tr = load_trace(_real(shared_dir, AZURE))
    assert len(tr) == 19_366
    assert tr.t.dtype == np.float64 and tr.prompt.dtype == np.int64 and tr.output.dtype == np.int64
    assert tr.t[0] == 0.0 and np.all(np.diff(tr.t) >= 0)
    d = describe(tr)
    assert d["span_s"] / 60 == pytest.approx(58.4, abs=0.05)
    assert d["mean_rate"] == pytest.approx(5.5, abs=0.05)
    assert d["arrival_cv"] == pytest.approx(1.09, abs=0.01)
    assert d["prompt_mean"] == pytest.approx(1155, abs=1) and d["prompt_median"] == 1020
    assert d["output_mean"] == pytest.approx(211, abs=1) and d["output_median"] == 129
    # 7-digit fractional seconds survive: the second request is 4.3145790 s after the first.
    assert tr.t[1] == pytest.approx(4.3145790, abs=1e-9)


def test_mooncake_real_trace(shared_dir):
    tr = load_trace(_real(shared_dir, MOONCAKE))
    assert len(tr) == 3_993
    assert tr.t[0] == 0.0 and np.all(np.diff(tr.t) >= 0)
    d = describe(tr)
    assert d["span_s"] == pytest.approx(1022.025)
    assert d["mean_rate"] == pytest.approx(3.9, abs=0.05)
    assert d["zero_gaps"] > 0  # a few requests share a millisecond; ties are allowed
    assert tr.prompt.min() >= 1 and tr.output.min() >= 1


def test_real_trace_sniffed_without_extension(shared_dir, tmp_path):
    for name in (AZURE, MOONCAKE):
        head = _real(shared_dir, name).read_bytes()[:20_000].rsplit(b"\n", 1)[0]
        p = _write(tmp_path, name + ".txt", head)
        tr = load_trace(p)
        assert len(tr) == head.count(b"\n") + (0 if name == AZURE else 1)


def test_trace_is_read_only(tmp_path):
    tr = load_trace(_write(tmp_path, "a.csv", f"{HEADER}\n2023-11-16 18:15:46.0000000,10,5\n"))
    with pytest.raises(ValueError):
        tr.t[0] = 1.0


# ---------------------------------------------------------------------------------------------
# format details that real Azure/Mooncake exports have


def test_azure_variants(tmp_path):
    body = (
        "2023-11-16 18:15:46.6805900,374,44\r\n"
        "2023-11-16 18:15:50.9951690,396,109\r\n"
        "\r\n"
        "2023-11-16 18:15:51,879,55"
    )  # CRLF, a blank line, no trailing newline, no fraction
    tr = load_trace(_write(tmp_path, "crlf.csv", "\ufeff" + HEADER + "\r\n" + body))
    assert len(tr) == 3
    assert tr.t.tolist() == pytest.approx([0.0, 4.314579, 4.31941])
    # columns in another order, an extra column, quotes, a T separator and a UTC offset
    tr2 = load_trace(
        _write(
            tmp_path,
            "reordered.csv",
            "GeneratedTokens,TIMESTAMP,extra,ContextTokens\n"
            '44,"2023-11-16T18:15:46.68059+00:00",x,374\n'
            "109,2023-11-16T19:15:50.9951690+01:00,y,396\n",
        )
    )
    assert tr2.prompt.tolist() == [374, 396] and tr2.output.tolist() == [44, 109]
    assert tr2.t[1] == pytest.approx(4.314579)


def test_mooncake_variants(tmp_path):
    lines = [
        {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]},
        {"timestamp": 0, "input_length": 11, "output_length": 3, "extra": {"ignored": True}},
        {"timestamp": 1500.5, "input_length": 12.0, "output_length": 4},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\n\n"
    tr = load_trace(_write(tmp_path, "m.json", text))
    assert tr.t.tolist() == [0.0, 0.0, 1.5005]
    assert tr.prompt.tolist() == [10, 11, 12] and tr.output.tolist() == [2, 3, 4]
    # timestamps not starting at zero are rebased to the first request
    tr2 = load_trace(
        _write(
            tmp_path,
            "m2.jsonl",
            '{"timestamp": 5000, "input_length": 1, "output_length": 1}\n'
            '{"timestamp": 7000, "input_length": 1, "output_length": 1}',
        )
    )
    assert tr2.t.tolist() == [0.0, 2.0]


def test_explicit_format_overrides_extension(tmp_path):
    p = _write(tmp_path, "weird.csv", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n')
    assert len(load_trace(p, "mooncake")) == 1
    with pytest.raises(InputError, match="line 1"):
        load_trace(p)  # by extension it is a CSV, and that header is wrong


def test_describe_small_trace(tmp_path):
    rows = [(0, 10, 1), (1000, 20, 3), (3000, 30, 5)]
    text = "\n".join(json.dumps({"timestamp": a, "input_length": b, "output_length": c}) for a, b, c in rows)
    d = describe(load_trace(_write(tmp_path, "d.jsonl", text)))
    assert d["rows"] == 3 and d["span_s"] == 3.0
    assert d["mean_rate"] == pytest.approx(2 / 3)
    assert d["arrival_cv"] == pytest.approx(np.std([1, 2]) / 1.5)
    assert d["prompt_mean"] == 20 and d["output_median"] == 3
    one = describe(load_trace(_write(tmp_path, "one.jsonl", text.splitlines()[0])))
    assert one["mean_rate"] is None and one["arrival_cv"] is None


# ---------------------------------------------------------------------------------------------
# malformed inputs: InputError naming the file and the line (or column)

OK = "2023-11-16 18:15:46.6805900,374,44"
OK2 = "2023-11-16 18:15:50.9951690,396,109"


def _jl(**kw) -> str:
    row = {"timestamp": 0, "input_length": 10, "output_length": 5}
    row.update(kw)
    return json.dumps({k: v for k, v in row.items() if v is not ...})


BAD = [
    # (id, file name, content, text the error must contain)
    ("csv-empty", "a.csv", "", "empty"),
    ("csv-blank", "a.csv", "\n\n  \n", "empty"),
    ("csv-header-only", "a.csv", HEADER + "\n", "no requests"),
    ("csv-wrong-header", "a.csv", "time,ContextTokens,GeneratedTokens\n" + OK, "line 1: missing column(s) TIMESTAMP"),
    (
        "csv-missing-column",
        "a.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,5",
        "line 1: missing column(s) GeneratedTokens",
    ),
    ("csv-duplicate-column", "a.csv", HEADER + ",TIMESTAMP\n" + OK + ",x", "line 1: column(s) TIMESTAMP"),
    ("csv-no-header", "a.csv", OK + "\n" + OK2, "line 1: missing column"),
    ("csv-short-row", "a.csv", f"{HEADER}\n{OK}\n2023-11-16 18:15:50,396\n", "line 3: expected 3"),
    ("csv-long-row", "a.csv", f"{HEADER}\n{OK}\n{OK2},7\n", "line 3: expected 3"),
    ("csv-bad-timestamp", "a.csv", f"{HEADER}\n{OK}\nyesterday,396,109\n", "line 3: TIMESTAMP"),
    ("csv-now", "a.csv", f"{HEADER}\nnow,396,109\n", "line 2: TIMESTAMP"),
    ("csv-empty-timestamp", "a.csv", f"{HEADER}\n{OK}\n,396,109\n", "line 3: TIMESTAMP"),
    ("csv-date-only-year", "a.csv", f"{HEADER}\n2023,396,109\n", "line 2: TIMESTAMP"),
    ("csv-invalid-day", "a.csv", f"{HEADER}\n{OK}\n2023-02-30 00:00:00.0,396,109\n", "line 3: TIMESTAMP"),
    ("csv-invalid-hour", "a.csv", f"{HEADER}\n{OK}\n2023-11-16 25:00:00.0,396,109\n", "line 3: TIMESTAMP"),
    ("csv-year-3000", "a.csv", f"{HEADER}\n3000-01-01 00:00:00.0,396,109\n", "line 2: TIMESTAMP"),
    ("csv-ten-fraction-digits", "a.csv", f"{HEADER}\n2023-11-16 18:15:46.0123456789,1,1\n", "line 2: TIMESTAMP"),
    (
        "csv-float-tokens",
        "a.csv",
        f"{HEADER}\n{OK}\n2023-11-16 18:15:50.0,3.5,109\n",
        "line 3: ContextTokens: not a whole",
    ),
    (
        "csv-negative-tokens",
        "a.csv",
        f"{HEADER}\n{OK}\n2023-11-16 18:15:50.0,396,-4\n",
        "line 3: GeneratedTokens: negative",
    ),
    (
        "csv-text-tokens",
        "a.csv",
        f"{HEADER}\n{OK}\n2023-11-16 18:15:50.0,abc,4\n",
        "line 3: ContextTokens: not a number",
    ),
    ("csv-underscore-tokens", "a.csv", f"{HEADER}\n2023-11-16 18:15:50.0,1_000,4\n", "line 2: ContextTokens"),
    ("csv-empty-tokens", "a.csv", f"{HEADER}\n2023-11-16 18:15:50.0,,4\n", "line 2: ContextTokens"),
    ("csv-nan-tokens", "a.csv", f"{HEADER}\n2023-11-16 18:15:50.0,nan,4\n", "line 2: ContextTokens"),
    (
        "csv-zero-prompt",
        "a.csv",
        f"{HEADER}\n{OK}\n2023-11-16 18:15:50.0,0,4\n",
        "line 3: ContextTokens: must be at least 1",
    ),
    (
        "csv-zero-output",
        "a.csv",
        f"{HEADER}\n{OK}\n2023-11-16 18:15:50.0,5,0\n",
        "line 3: GeneratedTokens: must be at least 1",
    ),
    (
        "csv-absurd-tokens",
        "a.csv",
        f"{HEADER}\n{OK}\n2023-11-16 18:15:50.0,20000000,4\n",
        "line 3: ContextTokens: implausible",
    ),
    (
        "csv-absurd-exponent",
        "a.csv",
        f"{HEADER}\n2023-11-16 18:15:50.0,1e300,4\n",
        "line 2: ContextTokens: implausible",
    ),
    ("csv-back-in-time", "a.csv", f"{HEADER}\n{OK2}\n{OK}\n", "line 3: TIMESTAMP goes back in time"),
    ("csv-back-in-time-after-blank", "a.csv", f"{HEADER}\n{OK2}\n\n{OK}\n", "line 4: TIMESTAMP goes back"),
    (
        "csv-span-too-long",
        "a.csv",
        f"{HEADER}\n{OK}\n2023-11-17 00:00:00.0,1,1\n2024-01-20 00:00:00.0,1,1\n",
        "line 4: TIMESTAMP is 64.2 days",
    ),
    ("csv-not-utf8", "a.csv", (f"{HEADER}\n{OK}\n").encode() + b"\xff\xfe,1,1\n", "line 3: not UTF-8"),
    ("csv-unclosed-quote", "a.csv", f'{HEADER}\n{OK}\n"2023-11-16 18:15:50.0,5,1\n', "line 3"),
    ("jsonl-empty", "a.jsonl", "", "empty"),
    ("jsonl-blank-lines", "a.jsonl", "\n \n", "empty"),
    ("jsonl-invalid-json", "a.jsonl", _jl() + "\n{timestamp: 1}\n", "line 2: not valid JSON"),
    ("jsonl-truncated", "a.jsonl", _jl() + "\n" + _jl()[:-5], "line 2: not valid JSON"),
    ("jsonl-array-line", "a.jsonl", _jl() + "\n[1, 2, 3]\n", "line 2: expected a JSON object"),
    ("jsonl-number-line", "a.jsonl", "\n\n42\n", "line 3: expected a JSON object"),
    ("jsonl-missing-key", "a.jsonl", _jl() + "\n" + _jl(output_length=...), "line 2: missing key 'output_length'"),
    ("jsonl-string-timestamp", "a.jsonl", _jl(timestamp="0"), "line 1: 'timestamp' must be a number"),
    (
        "jsonl-nan-timestamp",
        "a.jsonl",
        '{"timestamp": NaN, "input_length": 1, "output_length": 1}',
        "line 1: 'timestamp'",
    ),
    ("jsonl-huge-int-timestamp", "a.jsonl", _jl(timestamp=10**400), "line 1"),
    ("jsonl-bool-tokens", "a.jsonl", _jl(input_length=True), "line 1: 'input_length': must be a whole number"),
    ("jsonl-string-tokens", "a.jsonl", _jl(output_length="5"), "line 1: 'output_length': must be a whole number"),
    ("jsonl-float-tokens", "a.jsonl", _jl(input_length=3.5), "line 1: 'input_length': not a whole number"),
    ("jsonl-negative-tokens", "a.jsonl", _jl() + "\n" + _jl(output_length=-1), "line 2: 'output_length': negative"),
    ("jsonl-zero-prompt", "a.jsonl", _jl(input_length=0), "line 1: input_length: must be at least 1"),
    ("jsonl-zero-output", "a.jsonl", _jl(output_length=0), "line 1: output_length: must be at least 1"),
    ("jsonl-absurd-tokens", "a.jsonl", _jl(input_length=10**30), "line 1: 'input_length': implausible"),
    (
        "jsonl-back-in-time",
        "a.jsonl",
        "\n".join([_jl(timestamp=5), _jl(timestamp=9), _jl(timestamp=7)]),
        "line 3: timestamp goes back in time",
    ),
    ("jsonl-span-too-long", "a.jsonl", _jl() + "\n" + _jl(timestamp=31 * 86_400_000), "line 2: timestamp is 31.0 days"),
    ("jsonl-hash-ids-not-list", "a.jsonl", _jl(hash_ids=5), "line 1: 'hash_ids' must be a list"),
    ("sniff-unknown", "a.txt", "hello world\n", "line 1: cannot tell the trace format"),
]


@pytest.mark.parametrize("name,content,expect", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_trace(tmp_path, name, content, expect):
    path = _write(tmp_path, name, content)
    with pytest.raises(InputError) as err:
        load_trace(path)
    msg = str(err.value)
    assert str(path) in msg, msg
    assert expect in msg, msg
    assert err.value.file == str(path)


def test_missing_and_folder(tmp_path):
    with pytest.raises(InputError, match="not found") as err:
        load_trace(tmp_path / "nope.csv")
    assert "nope.csv" in str(err.value)
    with pytest.raises(InputError, match="folder"):
        load_trace(tmp_path)
    with pytest.raises(InputError, match="unknown trace format"):
        load_trace(_write(tmp_path, "a.csv", HEADER), "parquet")


# ---------------------------------------------------------------------------------------------
# property tests: arbitrary documents never escape as anything but InputError


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hyp")


_ts = st.one_of(
    st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(2300, 1, 1)).map(
        lambda d: d.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
    ),
    st.sampled_from(["", "now", "NaT", "2023-11-16", "2023-13-40 99:99:99", "2023-11-16T00:00:00Z"]),
    st.text(max_size=12),
)
_count = st.one_of(
    st.integers(-5, 30_000_000).map(str),
    st.floats(allow_nan=True).map(str),
    st.sampled_from(["", " 7 ", "+3", "1e3", "0x10", "٣"]),
    st.text(max_size=6),
)
_csv_row = st.one_of(
    st.tuples(_ts, _count, _count).map(",".join), st.lists(st.text(max_size=8), max_size=5).map(",".join)
)
_csv_doc = st.tuples(
    st.sampled_from([HEADER, HEADER.lower(), "GeneratedTokens,TIMESTAMP,ContextTokens", "", "a,b"]),
    st.lists(_csv_row, max_size=12),
    st.sampled_from(["\n", "\r\n", "\r"]),
).map(lambda x: x[2].join([x[0], *x[1]]))

_json_val = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_json_obj = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": st.one_of(st.integers(-1000, 4 * 10**9), _json_val),
        "input_length": st.one_of(st.integers(-2, 3 * 10**7), _json_val),
        "output_length": st.one_of(st.integers(-2, 3 * 10**7), _json_val),
        "hash_ids": _json_val,
        "other": _json_val,
    },
)
_json_line = st.one_of(_json_obj.map(json.dumps), _json_val.map(json.dumps), st.text(max_size=20))
_jsonl_doc = st.lists(_json_line, max_size=12).map("\n".join)

HYP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYP
@given(doc=st.one_of(_csv_doc, st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_any_csv_loads_or_raises_input_error(scratch, doc):
    _load_or_input_error(scratch / "h.csv", doc.encode("utf-8", "surrogatepass"))


@HYP
@given(doc=st.one_of(_jsonl_doc, st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_any_jsonl_loads_or_raises_input_error(scratch, doc):
    _load_or_input_error(scratch / "h.jsonl", doc.encode("utf-8", "surrogatepass"))


@HYP
@given(raw=st.binary(max_size=300))
def test_any_bytes_sniffed_load_or_raise_input_error(scratch, raw):
    _load_or_input_error(scratch / "h.trace", raw)


def _load_or_input_error(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        tr = load_trace(path)
    except InputError as e:
        assert e.file == str(path)
        return
    assert isinstance(tr, Trace) and len(tr) >= 1
    assert tr.t[0] == 0 and np.all(np.diff(tr.t) >= 0) and np.all(np.isfinite(tr.t))
    assert tr.prompt.min() >= 1 and tr.output.min() >= 1


_rows = st.lists(
    st.tuples(
        st.integers(0, 10**9),  # gap in 100-ns ticks (up to 100 s)
        st.integers(1, 10_000_000),
        st.integers(1, 10_000_000),
    ),
    min_size=1,
    max_size=40,
)


@HYP
@given(rows=_rows, start=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2199, 1, 1)))
def test_azure_round_trip(scratch, rows, start):
    ticks = np.cumsum([0] + [g for g, _, _ in rows[1:]])
    stamps = [
        (start + timedelta(microseconds=int(k) // 10)).strftime("%Y-%m-%d %H:%M:%S.%f") + str(int(k) % 10)
        for k in ticks
    ]
    text = "\n".join([HEADER] + [f"{s},{p},{o}" for s, (_, p, o) in zip(stamps, rows)])
    tr = load_trace(_write(scratch, "rt.csv", text))
    np.testing.assert_allclose(tr.t, ticks * 1e-7, rtol=0, atol=1e-9)
    assert tr.prompt.tolist() == [p for _, p, _ in rows]
    assert tr.output.tolist() == [o for _, _, o in rows]


@HYP
@given(rows=_rows, t0=st.integers(0, 10**9))
def test_mooncake_round_trip(scratch, rows, t0):
    ms = t0 + np.cumsum([0] + [g // 10_000 for g, _, _ in rows[1:]])
    text = "\n".join(
        json.dumps({"timestamp": int(m), "input_length": p, "output_length": o, "hash_ids": [1, 2]})
        for m, (_, p, o) in zip(ms, rows)
    )
    tr = load_trace(_write(scratch, "rt.jsonl", text))
    np.testing.assert_allclose(tr.t, (ms - ms[0]) / 1000.0, rtol=0, atol=1e-9)
    assert tr.prompt.tolist() == [p for _, p, _ in rows]
    assert tr.output.tolist() == [o for _, _, o in rows]
