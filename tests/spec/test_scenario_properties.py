"""Property tests: any document either loads as a Scenario or fails with InputError, never with
another exception (the loader is the first thing every user input meets)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import Scenario, read_yaml, scenario_from_dict

SECTIONS = {name: f.annotation for name, f in Scenario.model_fields.items() if not f.exclude}
KEYS = sorted(
    {
        *SECTIONS,
        "kind",
        "load",
        "period_s",
        "name",
        "params",
        "H",
        "islands",
        "h_min",
        "h_max",
        "ttft_s",
        "path",
        "colocation",
        "unlimited",
        "bogus",
    }
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["normal", "bursty", "trace", "fixed", "no_sync", "same_gpu", "gpu"]),
)
values = st.recursive(
    scalars,
    lambda ch: st.one_of(st.lists(ch, max_size=3), st.dictionaries(st.sampled_from(KEYS), ch, max_size=4)),
    max_leaves=12,
)
documents = st.one_of(values, st.dictionaries(st.sampled_from(KEYS), values, max_size=6))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_document_loads_or_raises_input_error(doc):
    try:
        sc = scenario_from_dict(doc, "<hypothesis>")
    except InputError as e:
        assert "<hypothesis>" in str(e)
        return
    assert isinstance(sc, Scenario)
    assert math.isfinite(sc.horizon_s) and sc.merge.h_min <= sc.merge.h_max


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_yaml_text_parses_or_raises_input_error(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("y") / "s.yaml"
    p.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        doc = read_yaml(p)
    except InputError as e:
        assert str(p) in str(e)
        return
    try:
        scenario_from_dict(doc, p)
    except InputError as e:
        assert str(p) in str(e)
