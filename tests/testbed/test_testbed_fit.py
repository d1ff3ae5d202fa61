"""The testbed twin's calibration on Stage 10: the fluid oracle, the fit, the profile.

- the packaged Stage 10 file holds exactly the fact sheet's numbers (when ../shared is present);
- the fluid drains work at the fair-share rate, hand-computed;
- in sample, every run the profile covers is reproduced within the issue's tolerances (requests 2%,
  p50/p95 5%, targeted-run ratios 5%); the anomalous 1.5B c = 4 run is not explained by the twin,
  and the test says so by showing its correlation is far off;
- the profile's numbers follow from the fit, and bad profiles are input errors;
- a profile is fitted once per file content and kept on disk; a corrupt or stale entry is refitted.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from wadiloco.models.engine.profiles import ProfileSpec, fit_profile, load_profile, profile_path
from wadiloco.models.errors import InputError
from wadiloco.models.testbed import fit, fluid

NOT_COVERED = {"vllm-1p5b-medium"}


def test_stage10_file_matches_the_fact_sheet(shared_dir):
    md = (shared_dir / "paper_testbed.md").read_text()
    runs = {r["name"]: r for r in fit.stage10()["runs"]}
    sec = md[md.index("### 6.2 Real measurements") : md.index("### 6.3")]
    seen = 0
    for line in sec.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("| vllm-") or len(cells) != 8:
            continue
        m = runs[cells[0]]["measured"]
        assert [m["requests"], m["output_tokens"]] == [int(cells[1]), int(cells[2])]
        assert [m["p50_ms"], m["p95_ms"], m["p99_ms"], m["tokens_per_s"], m["corr"]] == [float(x) for x in cells[3:]]
        seen += 1
    assert seen == 8


def test_drain_hand_computed():
    iv = [(1.0, 2.0), (3.0, 4.0)]
    assert fluid.drain(0.0, 0.5, iv, 0, 0.5) == (0.5, 0)  # done before the first interval
    end, _ = fluid.drain(0.0, 1.5, iv, 0, 0.5)  # 1 s at full speed, then 0.5 s of work at half speed
    assert end == pytest.approx(2.0)
    end, _ = fluid.drain(0.5, 2.0, iv, 0, 0.5)  # 0.5 + 0.5 (inside) + 1.0 -> ends at 3.0
    assert end == pytest.approx(3.0)
    end, _ = fluid.drain(1.5, 1.0, iv, 0, 0.25)  # 0.125 inside, 0.875 at full speed after 2.0
    assert end == pytest.approx(2.875)


def test_stress_starts_on_the_poll_grid():
    assert fluid.stress_intervals([(4.868, 40.132), (37.0, 45.0)]) == [(4.9, 40.132), (37.0, 45.0)]


def test_closed_loop_without_stress_is_back_to_back():
    b = fluid.closed_loop(2.0, 10.0, lambda k, t: (0.75, 8, 8 * 128), [], 0.5)
    assert len(b.start) == 11  # starts at 2.0, 2.75, ..., 9.5: the last starts before 10
    assert b.latency == pytest.approx([0.75] * 11)
    assert b.start[1:] == pytest.approx(b.end[:-1])


@pytest.mark.parametrize("row", fit.in_sample(), ids=lambda r: r["run"])
def test_stage10_in_sample(row):
    err, meas, sim = row["rel_err"], row["measured"], row["simulated"]
    if row["run"] in NOT_COVERED:
        # Its latency barely moves with pressure (corr 0.076) although stress must slow it: the
        # two-level twin predicts ~0.75. Stalls the artifact does not record are the likely cause.
        assert abs(sim["corr"] - meas["corr"]) > 0.5
        return
    assert abs(err["requests"]) <= 0.02
    assert abs(err["p50_ms"]) <= 0.05 and abs(err["p95_ms"]) <= 0.05
    mode = fit.run_spec(row["run"])["settings"]["stress"]["mode"]
    if mode == "sync":
        assert abs(err["sync_ratio"]) <= 0.05
    if mode == "pressure":
        assert abs(err["high_low_ratio"]) <= 0.05
    assert abs(sim["corr"] - meas["corr"]) <= 0.02


def test_profile_numbers_follow_from_the_fit():
    p = load_profile("b200_vllm0102_eager")
    targeted = [fit.fit_run(r) for r in ("vllm-1p5b-sync-heavy", "vllm-1p5b-pressure-heavy")]
    m = p.model("Qwen2.5-1.5B-Instruct")
    assert m.iteration_s(8) * 128 == pytest.approx(sum(f.l_u for f in targeted) / 2)
    assert p.cotenant("matmul_6144x20") == pytest.approx(sum(f.weight for f in targeted) / 2)
    assert 0.5 < p.cotenant("matmul_6144x20") < 0.6  # the targeted runs' ratios, 1.556 and 1.546
    assert m.d > 0 and math.isclose(m.d / m.iteration_s(8), p.relative_slope)
    with pytest.raises(InputError, match="no model"):
        p.model("Llama-70B")


def test_bad_profiles_name_the_field(tmp_path):
    spec = yaml.safe_load(load_profile("b200_vllm0102_eager").spec.model_dump_json())
    spec["models"]["Qwen2.5-1.5B-Instruct"]["runs"] = ["no-such-run"]
    with pytest.raises(InputError, match=r"models\.Qwen2\.5-1\.5B-Instruct\.runs"):
        fit_profile(ProfileSpec.model_validate(spec), "bad.yaml")
    with pytest.raises(InputError, match="no such profile"):
        load_profile(str(tmp_path / "missing.yaml"))


# ---- the stored fits (models/data/testbed/stage10_fit.json) ----------------------------------


def test_stored_fits_are_current():
    """Every run's fit is stored and was solved from today's Stage 10 file and fit code; if this fails,
    run `python -m wadiloco.models.testbed.fit --write` and commit the file."""
    assert set(fit._stored()) == {r["name"] for r in fit.stage10()["runs"]}, "stale: rerun the fit with --write"


def test_stored_fits_equal_solving_the_targeted_runs():
    """Bit for bit: what is stored is what solving gives (the two cheap runs here; all of them under -m slow)."""
    for name in ("vllm-1p5b-sync-heavy", "vllm-1p5b-pressure-heavy"):
        assert fit.solve_run(name) == fit._stored()[name]


@pytest.mark.slow
def test_stored_fits_equal_solving_every_run():
    assert fit.solve_all() == tuple(fit._stored()[r["name"]] for r in fit.stage10()["runs"])


def test_a_stale_store_is_ignored(monkeypatch):
    """When the digest no longer matches (the data or the code changed), fits are solved, not read."""
    monkeypatch.setattr(fit, "inputs_digest", lambda: "changed")
    fit._stored.cache_clear()
    try:
        assert fit._stored() == {}
        assert fit.fit_run("vllm-1p5b-pressure-heavy") == fit.solve_run("vllm-1p5b-pressure-heavy")
    finally:
        monkeypatch.undo()
        fit._stored.cache_clear()


# ---- one fit per profile content, kept on disk ---------------------------------------------------------


def _fits_counted(monkeypatch) -> list[str]:
    """Clear this process's loaded profiles and count the fits from now on."""
    from wadiloco.models.engine import profiles

    monkeypatch.setattr(profiles, "_LOADED", {})
    calls: list[str] = []
    real = profiles.fit_profile
    monkeypatch.setattr(profiles, "fit_profile", lambda spec, src: calls.append(src) or real(spec, src))
    return calls


def test_a_profile_is_fitted_once_per_content_and_read_back_from_disk(tmp_path, monkeypatch):
    from wadiloco.models.engine import profiles

    monkeypatch.setenv(profiles.CACHE_ENV, str(tmp_path / "cache"))
    mine = tmp_path / "mine.yaml"
    mine.write_bytes(profile_path("b200_vllm0102_eager").read_bytes())
    calls = _fits_counted(monkeypatch)
    first = load_profile(mine)
    assert calls == [str(mine)] and len(list((tmp_path / "cache" / "profiles").glob("*.json"))) == 1
    monkeypatch.setattr(profiles, "_LOADED", {})  # a new process: the disk entry, no fit
    again = load_profile(mine)
    assert calls == [str(mine)]
    assert again.models == first.models and again.cotenants == first.cotenants  # bit for bit (JSON floats)
    assert again.relative_slope == first.relative_slope
    mine.write_text(mine.read_text().replace("batch_slope:", "batch_slope_scale: 2.0\nbatch_slope:"))
    edited = load_profile(mine)  # another content: fitted again
    assert len(calls) == 2 and edited.relative_slope == 2.0 * first.relative_slope


@pytest.mark.parametrize("entry", ["{not json", '{"format": 1, "key": "another"}', "[]"])
def test_a_corrupt_or_stale_cache_entry_is_refitted(tmp_path, monkeypatch, entry):
    from wadiloco.models.engine import profiles

    monkeypatch.setenv(profiles.CACHE_ENV, str(tmp_path))
    calls = _fits_counted(monkeypatch)
    good = load_profile("b200_vllm0102_eager")
    (path,) = (tmp_path / "profiles").glob("*.json")
    path.write_text(entry)
    monkeypatch.setattr(profiles, "_LOADED", {})
    refit = load_profile("b200_vllm0102_eager")
    assert len(calls) == 2 and refit.models == good.models and refit.cotenants == good.cotenants
    assert json.loads(path.read_text())["key"] == path.stem  # the entry was replaced


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    from wadiloco.models.engine import profiles

    (tmp_path / "file").write_text("")
    monkeypatch.setenv(profiles.CACHE_ENV, str(tmp_path / "file"))  # profiles/ cannot be made under a file
    calls = _fits_counted(monkeypatch)
    assert load_profile("b200_vllm0102_eager").cotenant("matmul_6144x20") > 0 and len(calls) == 1
