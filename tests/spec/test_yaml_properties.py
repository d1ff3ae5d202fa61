"""Property: a scenario file with a defect -- a key given twice, an alias bomb, nesting past the
limit, an integer of thousands of digits, a non-finite number, a boolean or a text where a number
goes -- mixed with valid lines and harmless aliases, always ends the same way through the real
command line: exit code 2, one message naming the file, no traceback, within a time limit, and no
output folder. Hypothesis draws the documents (derandomized, so CI sees the same ones)."""

from __future__ import annotations

import signal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wadiloco.experiments.cli import main

NUMBER_FIELDS = [
    ("horizon_s",),
    ("drain_s",),
    ("fleet", "islands"),
    ("fleet", "nic_gbps"),
    ("training", "step_time_s"),
    ("monitor", "sample_s"),
    ("workload", "load"),
    ("policy", "params", "H"),
    ("slo", "ttft_s"),
]
VALID = {
    "name": "name: prop",
    "horizon_s": "horizon_s: 30",
    "drain_s": "drain_s: 5",
    "fleet": "fleet: {islands: 2, hosts_per_island: 1}",
    "slo": "slo: {ttft_s: &t 1.5, tpot_s: *t}",  # a harmless alias
    "workload": "workload: {kind: normal, load: 0.5}",
    "policy": "policy: {name: fixed, params: {H: 256}}",
}


def _nested(path: tuple[str, ...], value: str) -> str:
    inner = f"{path[-1]}: {value}"
    for key in reversed(path[:-1]):
        extra = ", kind: normal" if key == "workload" else ", name: fixed" if key == "policy" else ""
        inner = f"{key}: {{{inner}{extra}}}"
    return inner


bad_numbers = st.one_of(
    st.integers(20, 5000).map(lambda n: "9" * n),  # past 2^63, past int()'s digit limit
    st.sampled_from([".nan", ".inf", "-.inf", "1.0e400", "-1e999"]),
    st.sampled_from(["true", "false", '"30"', "'1e3'", "0x1E", "0o17", "1_000", "1:30", "[1]", "{a: 1}"]),
)


@st.composite
def defect(draw) -> tuple[str, list[str]]:
    """(the defect's top-level key, its lines)."""
    kind = draw(st.sampled_from(["duplicate", "bomb", "deep", "number"]))
    if kind == "duplicate":
        key = draw(st.sampled_from(sorted(VALID)))
        return key, [VALID[key], VALID[key].replace("30", "60")]
    if kind == "bomb":
        width, depth = draw(st.integers(8, 14)), draw(st.integers(6, 10))
        lines = ["workload:", "  kind: normal", f"  a0: &a0 [{', '.join(['x'] * width)}]"]
        lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth)]
        return "workload", lines
    if kind == "deep":
        n = draw(st.integers(65, 900))
        if draw(st.booleans()):
            return "workload", ["workload: " + "[" * n + "]" * n]
        return "policy", ["policy: {name: fixed, params: " + "{a: " * n + "1" + "}" * n + "}"]
    path = draw(st.sampled_from(NUMBER_FIELDS))
    return path[0], [_nested(path, draw(bad_numbers))]


@st.composite
def documents(draw) -> str:
    key, bad = draw(defect())
    others = [k for k in VALID if k != key]
    keep = draw(st.lists(st.sampled_from(others), unique=True, max_size=len(others)))
    lines = [VALID[k] for k in keep] + bad
    order = draw(st.permutations(range(len(keep) + 1)))  # the defect's block stays whole
    blocks = [[VALID[k]] for k in keep] + [bad]
    lines = [line for i in order for line in blocks[i]]
    return "\n".join(lines) + "\n"


class _Slow(BaseException):
    pass


def _alarm(signum, frame):
    raise _Slow()


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=documents())
def test_a_defective_scenario_ends_with_one_clean_error(tmp_path, capsys, text):
    p = tmp_path / "prop.yaml"
    p.write_text(text)
    out = tmp_path / "out"
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        rc = main(["run", str(p), "--out", str(out)])
    except _Slow:
        rc = "took more than 20 s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err
    assert rc == 2, (rc, err, text[:500])
    assert "Traceback" not in err and str(p) in err, (err, text[:500])
    assert err.strip() and "\n" not in err.strip(), err
    assert not out.exists()
