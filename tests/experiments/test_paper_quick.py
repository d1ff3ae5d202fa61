"""The paper study (experiments/paper.yaml, paper_quick.yaml) and its table (experiments/studies/paper_table.py).

- The two shipped sweep files plan the paper study (regimes, policies, seeds, R, 600 s).
- paper_quick.yaml runs end to end through the CLI on 2 workers, shrunk (2 seeds, 300 s, R=2) in the
  default suite and as shipped under the `slow` marker; its output's structure and the content that
  holds at any size are checked (every run ok, loads matched, no-sync's sync-excess exactly 0, matched
  budgets, sync-excess recomputed from raw rates, a verdict per arm), no figure: too few seeds.
- The table renderer on a tiny synthetic summary.csv, and the doc page's marker replacement.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from shipped import trace_or_skip

from wadiloco.experiments.cli import main
from wadiloco.experiments.studies import paper_table
from wadiloco.experiments.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[2]
EXP = ROOT / "experiments"
REGIMES = ["normal", "pressure_heavy", "sustained_sync_heavy", "bursty", "aperiodic", "azure_conv"]
ARMS = [
    "no_sync",
    "fixed[H=256]",
    "fixed[H=512]",
    "pressure_gated",
    "wa_diloco",
    "online_forecast",
    "overlap_oracle",
    "sim_oracle",
    "matched_random[wa_diloco]",
    "matched_random[online_forecast]",
]
VERDICT = r"^(demonstrated$|not demonstrated: .+|n/a: .+)"


def _expected_runs(plan) -> int:
    return sum(len(plan.seeds) * a.draws for r in plan.regimes for a in plan.arms if a.runs_in(r.name))


@pytest.mark.parametrize("fname, seeds, draws", [("paper.yaml", 30, 20), ("paper_quick.yaml", 5, 5)])
def test_shipped_paper_sweeps_plan_the_study(fname, seeds, draws):
    with trace_or_skip(fname):  # (its azure_conv regime replays a trace)
        plan = load_sweep(EXP / fname)
    assert [r.name for r in plan.regimes] == REGIMES
    assert all(r.scenario.horizon_s == 600 for r in plan.regimes)
    assert plan.seeds == list(range(seeds))
    assert [a.label for a in plan.arms] == ARMS
    for a in plan.arms:
        assert a.draws == (draws if a.name == "matched_random" else 1), a.label
    assert plan.arm("overlap_oracle").reference == plan.arm("sim_oracle").reference == "wa_diloco"
    assert {a.reference for a in plan.arms if a.role == "control"} == {"wa_diloco", "online_forecast"}
    # fixed H=512 is outside sustained_sync_heavy's 128-256 corridor and runs everywhere else
    assert not plan.arm("fixed[H=512]").runs_in("sustained_sync_heavy")
    assert all(plan.arm("fixed[H=512]").runs_in(r) for r in REGIMES if r != "sustained_sync_heavy")
    tasks = plan.tasks()
    assert len(tasks) == _expected_runs(plan) == seeds * (5 * (8 + 2 * draws) + (7 + 2 * draws))
    assert len({t.key for t in tasks}) == len(tasks)


def test_paper_and_quick_differ_only_in_seeds_and_draws():
    full = yaml.safe_load((EXP / "paper.yaml").read_text())
    quick = yaml.safe_load((EXP / "paper_quick.yaml").read_text())
    for d in (full, quick):
        for k in ("name", "description", "seeds"):
            d.pop(k)
        for p in d["policies"]:
            p.pop("draws", None)
    assert full == quick


# ---- paper_quick.yaml, end to end ------------------------------------------------------------


def _shrunk_sweep(tmp_path: Path, derive_scenario, seeds: int, horizon_s: float, draws: int, resamples: int) -> Path:
    """experiments/paper_quick.yaml with only its size changed (seeds, horizon, matched-random R,
    bootstrap resamples), written to tmp. Its regimes are copies of the shipped scenarios with trace paths made absolute
    (conftest.derive_scenario), so it also runs from a worktree beside $WADILOCO_SHARED."""
    doc = yaml.safe_load((EXP / "paper_quick.yaml").read_text())
    doc["regimes"] = [str(derive_scenario(EXP / r, tmp_path / "scenarios")) for r in doc["regimes"]]
    doc.update(seeds=seeds, horizon_s=horizon_s)
    doc["bootstrap"]["n_resamples"] = resamples
    for p in doc["policies"]:
        if "draws" in p:
            p["draws"] = draws
    path = tmp_path / "paper_quick.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run_and_check(sweep: Path, out: Path, seeds: int, draws: int, capsys, figures: bool = True) -> None:
    """Run `sweep` through the CLI on 2 workers; check the structure of its output and the content
    that holds at any size: every run ok, loads matched, the no-sync baseline's sync-excess exactly
    0, matched controls spend their reference's budget seed by seed, sync-excess recomputed from the
    raw violation rates, a verdict for every (regime, arm), the paper table renders."""
    argv = ["sweep", str(sweep), "--out", str(out), "--workers", "2", "--no-progress"]
    assert main(argv + ([] if figures else ["--no-figures"])) == 0
    plan = load_sweep(sweep)
    for f in ["runs.csv", "summary.csv", "comparisons.csv", "report.md", "report.html", "runs.sqlite"]:
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    if figures:
        pngs = list((out / "figures").glob("*.png"))
        assert pngs and all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)

    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == len(plan.tasks()) == _expected_runs(plan) == seeds * (5 * (8 + 2 * draws) + (7 + 2 * draws))
    assert (runs["status"] == "ok").all(), runs.loc[runs["status"] != "ok", ["regime", "policy", "seed", "error"]]
    assert not runs.duplicated(["regime", "policy", "seed", "draw"]).any()
    assert (runs.groupby(["regime", "seed"])["arrivals_hash"].nunique() == 1).all()
    assert (runs.loc[runs["policy"] == "no_sync", "merges"] == 0).all()
    assert (runs.loc[runs["policy"] == "wa_diloco", "merges"] > 0).mean() >= 0.5  # the size still lets merges happen
    _check_matched_budgets(runs)

    summ = pd.read_csv(out / "summary.csv")
    want = [(r.name, a.label) for r in plan.regimes for a in plan.arms if a.runs_in(r.name)]
    assert list(zip(summ["regime"], summ["policy"])) == want
    assert set(summ["regime"]) == set(REGIMES)
    assert ("sustained_sync_heavy", "fixed[H=512]") not in set(want)
    for c in paper_table.REQUIRED + [
        "p95_ratio",
        "p95_ratio_ci_low",
        "p95_ratio_ci_high",
        "mr_envelope_low",
        "mr_envelope_high",
        "load_match",
    ]:
        assert c in summ.columns, c
    assert summ["load_match"].astype(bool).all()
    assert summ["verdict"].str.match(VERDICT).all() and summ["verdict"].notna().all()
    assert (summ.loc[summ["role"] == "baseline", "verdict"] == "n/a: no-sync baseline").all()
    assert (summ.loc[summ["role"] == "control", "verdict"] == "n/a: matched-random control").all()
    base = summ[summ["policy"] == "no_sync"]
    assert len(base) == len(REGIMES)
    assert (base[["sync_excess_mean", "merges_mean"]] == 0).all().all()
    # exactly 0 on every seed: no interval, and the note says so
    assert base[["sync_excess_ci_low", "sync_excess_ci_high"]].isna().all().all()
    assert (base["sync_excess_note"] == "all zero").all()
    _check_sync_excess(runs, summ)
    pol = summ[summ["role"] == "policy"].set_index(["regime", "policy"])
    for reg in REGIMES:
        assert pol.loc[(reg, "wa_diloco"), "matched_control"] == "matched_random[wa_diloco]"
        assert pol.loc[(reg, "overlap_oracle"), "matched_control"] == "matched_random[wa_diloco]"
        assert pol.loc[(reg, "sim_oracle"), "matched_control"] == "matched_random[wa_diloco]"
        assert pol.loc[(reg, "online_forecast"), "matched_control"] == "matched_random[online_forecast]"
    assert (summ["n_seeds"] == seeds).all()

    # the paper table renders from this output: one section per regime, controls marked with R
    capsys.readouterr()
    assert paper_table.main([str(out)]) == 0
    text = capsys.readouterr().out
    for reg in REGIMES:
        assert f"### {reg}\n" in text
    assert f"| matched_random[wa_diloco] (R={draws}) |" in text


def _check_matched_budgets(runs: pd.DataFrame) -> None:
    """Every matched control, on every seed and draw, merges exactly as often as its reference did."""
    merges = runs.set_index(["regime", "policy", "seed"])["merges"]
    for label, ref in [
        ("matched_random[wa_diloco]", "wa_diloco"),
        ("matched_random[online_forecast]", "online_forecast"),
        ("overlap_oracle", "wa_diloco"),
        ("sim_oracle", "wa_diloco"),
    ]:
        ctl = runs[runs["policy"] == label]
        assert len(ctl) and (ctl["merges"] == ctl["reference_merges"]).all(), label
        assert all(m == merges[(g, ref, s)] for g, s, m in zip(ctl["regime"], ctl["seed"], ctl["merges"])), label


def _check_sync_excess(runs: pd.DataFrame, summ: pd.DataFrame) -> None:
    """sync_excess_mean recomputed from the raw violation rates: per seed, the arm's rate (mean over
    draws) minus no_sync's on the same seed, then the mean over seeds."""
    base = runs[runs["policy"] == "no_sync"].set_index(["regime", "seed"])["slo_violation_rate"]
    for (reg, label), a in runs.groupby(["regime", "policy"]):
        per_seed = a.groupby("seed")["slo_violation_rate"].mean()
        want = np.mean([v - base[(reg, s)] for s, v in per_seed.items()])
        got = summ.loc[(summ["regime"] == reg) & (summ["policy"] == label), "sync_excess_mean"].item()
        assert got == pytest.approx(want, abs=1e-8), (reg, label)  # runs.csv keeps 9 significant digits


@pytest.mark.slow  # 40 s of CPU: the tiny sweep (tests/experiments/test_sweep.py) covers the pipeline in every suite
def test_paper_quick_end_to_end(tmp_path, shared_dir, derive_scenario, capsys):
    """experiments/paper_quick.yaml at a reduced size (2 seeds, 200 s windows, R=2: 130 runs, most
    with one merge; 1,999 bootstrap resamples), through the CLI on 2 workers: every regime, policy and
    analysis step of the shipped file, checked for content that holds at any size. Figures are left
    to the tiny sweep's test (the same code per regime) and to the shipped size under `-m slow`.
    One test (not a module fixture shared by several), so pytest-xdist runs the sweep once."""
    sweep = _shrunk_sweep(tmp_path, derive_scenario, seeds=2, horizon_s=200, draws=2, resamples=1999)
    _run_and_check(sweep, tmp_path / "out", seeds=2, draws=2, capsys=capsys, figures=False)


@pytest.mark.slow
def test_paper_quick_end_to_end_as_shipped(tmp_path, shared_dir, capsys):
    """experiments/paper_quick.yaml as shipped (505 runs of 600 s; about 4 minutes on 2 cores, more on
    a loaded machine). 5 seeds support no claim, so no figure is asserted beyond what holds at any size."""
    _run_and_check(EXP / "paper_quick.yaml", tmp_path / "out", seeds=5, draws=5, capsys=capsys)


# ---- the table renderer on a synthetic summary ----------------------------------------------


def _row(
    regime,
    policy,
    name,
    role,
    se=np.nan,
    lo=np.nan,
    hi=np.nan,
    ratio=np.nan,
    ctrl="",
    p=np.nan,
    ph=np.nan,
    verdict="",
    merges=3.0,
):
    return {
        "regime": regime,
        "policy": policy,
        "policy_name": name,
        "role": role,
        "n_seeds": 5,
        "merges_mean": merges,
        "sync_excess_mean": se,
        "sync_excess_ci_low": lo,
        "sync_excess_ci_high": hi,
        "p95_ratio_matched": ratio,
        "p95_ratio_matched_ci_low": ratio - 0.1 if ratio == ratio else np.nan,
        "p95_ratio_matched_ci_high": ratio + 0.1 if ratio == ratio else np.nan,
        "regime_p95_ratio": 1.02 if regime == "normal" else 1.8,
        "regime_p95_ratio_ci_low": 0.98 if regime == "normal" else 1.5,
        "regime_p95_ratio_ci_high": 1.07 if regime == "normal" else 2.1,
        "transfer_basis": "matched-random draws",
        "transfer_state": "none" if regime == "normal" else "harms",
        "effect_transfers": regime != "normal",
        "matched_control": ctrl,
        "placement_rank": 0.3 if ctrl else np.nan,
        "p_placement": p,
        "p_placement_holm": ph,
        "holm_family": "2 policy-vs-matched-random comparisons in this sweep with an informative seed",
        "p_wilcoxon": 0.5 if ctrl else np.nan,
        "sync_excess_note": "all zero" if se == 0 and lo != lo else "",
        "verdict": verdict,
    }


@pytest.fixture
def synthetic(tmp_path):
    bad = (
        "not demonstrated: effect does not transfer (p95 ratio on matched-random draws 1.020 [0.980, 1.070]; "
        "needs the CI above 1 and a ratio >= 1.05); not better placed than matched_random[wa_diloco] (placement "
        "test: mean rank 0.300 of 1, p 0.4, Holm 0.8, alpha 0.05)"
    )
    rows = [
        _row("normal", "no_sync", "no_sync", "baseline", 0, merges=0, verdict="n/a: no-sync baseline"),
        _row(
            "normal",
            "wa_diloco",
            "wa_diloco",
            "policy",
            0.001,
            -0.002,
            0.004,
            1.01,
            "matched_random[wa_diloco]",
            0.4,
            0.8,
            bad,
        ),
        _row(
            "normal",
            "matched_random[wa_diloco]",
            "matched_random",
            "control",
            0.0,
            -0.001,
            0.002,
            1.0,
            verdict="n/a: matched-random control",
        ),
        _row("bursty", "no_sync", "no_sync", "baseline", 0, merges=0, verdict="n/a: no-sync baseline"),
        _row(
            "bursty",
            "overlap_oracle",
            "overlap_oracle",
            "policy",
            0.0123,
            0.005,
            0.02,
            1.5,
            "matched_random[wa_diloco]",
            0.0004,
            0.0008,
            "demonstrated",
        ),
        _row(
            "bursty",
            "matched_random[wa_diloco]",
            "matched_random",
            "control",
            0.05,
            0.04,
            0.06,
            2.0,
            verdict="n/a: matched-random control",
        ),
    ]
    out = tmp_path / "out"
    out.mkdir()
    pd.DataFrame(rows).to_csv(out / "summary.csv", index=False)
    pd.DataFrame(
        {"policy": ["no_sync", "matched_random[wa_diloco]", "matched_random[wa_diloco]"], "draw": [0, 0, 4]}
    ).to_csv(out / "runs.csv", index=False)
    return out


def test_table_rendering_on_synthetic_summary(synthetic):
    text = paper_table.render_table(synthetic)
    assert text.index("### normal") < text.index("### bursty")
    assert "R = 5 matched-random draws" in text
    assert "Holm-corrected over the family of 2 policy-vs-matched-random comparisons in this sweep" in text
    # normal: regime line, short verdict, paper's finding beside it
    assert "p95 ratio (matched) on the matched-random draws 1.020 [0.980, 1.070]; effect transfers: no." in text
    assert (
        "| wa_diloco | 3.0 | +0.100 [-0.200, 0.400] | 1.010 [0.910, 1.110] | matched_random[wa_diloco] | 0.300 "
        "| 0.400 | 0.800 | 0.500 | no: effect does not transfer; not better than matched-random | p95 ratio ~1.0; "
        "no policy matters |"
    ) in text
    # no interval for data without variance: the reason instead of [0.000, 0.000]
    assert "| no_sync | 0.0 | +0.000 (all zero) | n/a |  |  |  |  |  | n/a: no-sync baseline |  |" in text
    assert "[0.000, 0.000]" not in text
    assert "p95 ratio of merge vs no-merge windows is about 1.0" in text
    # bursty: the oracle's and matched-random's paper figures, tiny p-values, R in the control's label
    assert (
        "| overlap_oracle | 3.0 | +1.230 [0.500, 2.000] | 1.500 [1.400, 1.600] | matched_random[wa_diloco] "
        "| 0.300 | <0.001 | <0.001 | 0.500 | demonstrated | 4.45% (the paper's oracle) |"
    ) in text
    assert "| matched_random[wa_diloco] (R=5) | 3.0 | +5.000 [4.000, 6.000] |" in text
    assert "| 6.26% |" in text
    # every table row has the same number of cells as the header
    for block in text.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if lines:
            assert len({ln.replace("\\|", "").count("|") for ln in lines}) == 1
    full = paper_table.render_table(synthetic, full_verdicts=True)
    assert "not demonstrated: effect does not transfer (p95 ratio on matched-random draws 1.020" in full


def test_smallest_p_value_is_stated_when_no_claim_is_possible(synthetic):
    s = pd.read_csv(synthetic / "summary.csv")
    s["n_seeds"] = 1
    s.to_csv(synthetic / "summary.csv", index=False)
    text = paper_table.render_table(synthetic)
    assert "with 1 seeds and R = 5 the smallest possible placement p-value is (R + 1)^-1 = 0.1667" in text


def test_doc_page_markers_replaced_and_idempotent(synthetic, tmp_path, capsys):
    page = tmp_path / "paper_study.md"
    before, after = "# Title\n\nintro\n\n", "\n\n## Next\n\ntext\n"
    page.write_text(before + paper_table.START + "\nold table\n" + paper_table.END + after)
    assert paper_table.main([str(synthetic), "--doc", str(page)]) == 0
    printed = capsys.readouterr().out
    once = page.read_text()
    assert once.startswith(before + paper_table.START + "\n") and once.endswith(paper_table.END + after)
    assert "old table" not in once and printed.strip() in once
    assert paper_table.main([str(synthetic), "--doc", str(page)]) == 0
    assert page.read_text() == once

    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers here\n")
    assert paper_table.main([str(synthetic), "--doc", str(plain)]) == 2
    assert plain.read_text() == "no markers here\n"
    assert "markers" in capsys.readouterr().err
    assert paper_table.main([str(tmp_path / "nowhere")]) == 2


def test_short_verdicts():
    sv = paper_table.short_verdict
    assert sv("demonstrated") == "demonstrated"
    assert sv("n/a: no-sync baseline") == "n/a: no-sync baseline"
    assert (
        sv("not demonstrated: no matched-random control spends this policy's merge budget") == "no: no matched control"
    )
    assert (
        sv("not demonstrated: incomplete (3 of 5 runs completed); loads differ (x)")
        == "no: incomplete (3 of 5 runs completed); loads differ"
    )
    assert re.match(r"^no: ", sv("not demonstrated: something new")) is not None
    assert sv("not demonstrated: merges relieve serving here (x; y): there is no harm") == "no: merges relieve serving"
    assert sv("not demonstrated: placement not testable against c (z)") == "no: all tie: not testable"
    assert sv("not demonstrated: effect too small (p95 ratio 1.02)") == "no: effect below threshold"
