"""Render a sweep's outputs from its store: runs.csv, summary.csv, comparisons.csv, figures,
provenance.json and report.md / report.html. Everything is recomputed from `runs.sqlite`, so `wadiloco report DIR`
gives the same files as the end of `wadiloco sweep` (figures aside, which are not byte-compared).
Every file is written atomically (temp file + os.replace).

Names in a sweep (its name and description, regimes, labels, paths, error texts) are the user's, so
every text is escaped for the format it lands in: in report.html by the template engine (Jinja2,
autoescape on; experiments/templates/report.html.j2), and in report.md (tables by tabulate)
kept on one line with Markdown's and HTML's active characters backslash-escaped or entity-encoded,
so a name can be neither a heading nor a link nor a tag. Figures draw names as plain text (no
mathtext), so a `$` in a label cannot break a plot."""

from __future__ import annotations

import functools
import io
import json
import math
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from wadiloco.experiments import gate as G
from wadiloco.experiments import protocol as P
from wadiloco.experiments.output import write_atomic
from wadiloco.experiments.store import STORE_NAME, Store
from wadiloco.experiments.sweep.kill_points import kill_point
from wadiloco.experiments.sweep.plan import Plan
from wadiloco.models.errors import InputError
from wadiloco.models.results import metrics as M


def FLOAT_FORMAT(x: float) -> str:
    """9 significant digits, always with a decimal point or exponent, so a float column of whole
    numbers reads back as float (0.0, not 0)."""
    s = f"{x:.9g}"
    return s if any(c in s for c in ".enN") else s + ".0"


def csv_text(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
    return buf.getvalue()


def load(out: Path) -> tuple[Plan, list[dict[str, Any]], Store]:
    """The plan and the rows a sweep folder's store holds, each checked as it is read (a damaged
    store is an input error naming it), and the store (open, read-only)."""
    store = Store(out / STORE_NAME, readonly=True)
    try:
        plan = Plan.from_store(store)
        rows = list(store.rows())
    except BaseException:
        store.close()
        raise
    return plan, rows, store


def _pct(x: float, digits: int = 2) -> str:
    return f"{x * 100:.{digits}f}" if x is not None and math.isfinite(x) else "n/a"


def _ci_pct(m, lo, hi, note="", d=2) -> str:
    return _ci(m * 100 if math.isfinite(m) else m, lo * 100, hi * 100, note, d)


def _ci(m, lo, hi, note="", d=3) -> str:
    """mean [low, high]; where there is no interval, the mean and why (e.g. "all zero")."""
    if not math.isfinite(m):
        return "n/a"
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{m:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]"
    note = note if isinstance(note, str) else ""
    return f"{m:.{d}f}" + (f" ({note})" if note else "")


def _p(x) -> str:
    return f"{x:.3g}" if x is not None and math.isfinite(x) else "n/a"


# ---- a tiny document model rendered to both Markdown and HTML ---------------------------------


_MD_ACTIVE = re.compile(r"[\\`*\[\]|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_LEAD = re.compile(r"^(\s*(?:\d+)?)([#>+=-]|(?<=\d)[.)](?=\s|$))")


def md_text(s: object, lead: bool = True) -> str:
    """`s` as inert Markdown on one line: line breaks become spaces; characters that make links,
    emphasis, code, tables, math or strike-through are backslash-escaped (an underscore inside a
    word, as in no_sync, makes nothing and stays as it is); < and & become entities (no raw HTML,
    no autolink, no entity); with `lead`, a leading #, >, -, +, = or "1. " is escaped (no heading,
    quote or list; a table cell has no such blocks, so a cell's -1.5 stays as it is)."""
    text = " ".join(str(s).splitlines()) if s is not None else ""
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = _MD_ACTIVE.sub(lambda m: "\\" + m.group(0), text)
    return _MD_LEAD.sub(lambda m: m.group(1) + "\\" + m.group(2), text) if lead else text


def _cells(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """A table's header and rows as text, the same for both formats: a missing value reads n/a."""

    def cell(v: object) -> str:
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    return [str(c) for c in df.columns], [[cell(v) for v in row] for row in df.itertuples(index=False)]


def _md_table(df: pd.DataFrame) -> str:
    """A pipe table by tabulate, every cell made inert first (no number parsing: -1.5 and 0.00 stay
    as written)."""
    from tabulate import tabulate

    head, rows = _cells(df)
    esc = [[md_text(v, lead=False) for v in r] for r in rows]
    return tabulate(esc, headers=[md_text(h, lead=False) for h in head], tablefmt="pipe", disable_numparse=True)


def render_md(blocks) -> str:
    out = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + md_text(b[1]))
        elif kind == "p":
            out.append(md_text(b[1]))
        elif kind == "ul":
            out.append("\n".join(f"- {md_text(x)}" for x in b[1]))
        elif kind == "table":
            out.append(_md_table(b[1]))
        elif kind == "img":
            out.append(f"![{md_text(b[2])}](<{_md_url(b[1])}>)")
        elif kind == "pre":
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", b[1])), default=0))
            out.append(f"{fence}\n{b[1]}\n{fence}")
    return "\n\n".join(out) + "\n"


def _md_url(path: str) -> str:
    """A link target inside <...>: no line break, no angle bracket, spaces kept."""
    return quote(" ".join(str(path).splitlines()), safe="/._-~ ()")


def _img_src(path: str, base: Path | None) -> str:
    """A figure as a data URI when its file is at hand, so the HTML report is one file that still
    shows its figures when moved or mailed; its relative path otherwise."""
    f = base / path if base is not None else None
    if f is None or not f.is_file():
        return path
    import base64

    return "data:image/png;base64," + base64.b64encode(f.read_bytes()).decode("ascii")


TEMPLATE = "report.html.j2"  # experiments/templates/, installed as package data


@functools.cache
def _template():
    """The page template, autoescaping every value (Jinja2's select_autoescape would key on the
    file name, and .j2 is not in its list: so escaping is switched on outright)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("wadiloco.experiments", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template(TEMPLATE)


def _html_block(b, base: Path | None) -> dict[str, Any]:
    kind = b[0]
    if kind == "ul":
        return {"kind": kind, "items": [str(x) for x in b[1]]}
    if kind == "table":
        columns, rows = _cells(b[1])
        return {"kind": kind, "columns": columns, "rows": rows}
    if kind == "img":
        return {"kind": kind, "src": _img_src(b[1], base), "alt": str(b[2])}
    return {"kind": kind, "text": str(b[1])}


def render_html(title: str, blocks, base: Path | None = None) -> str:
    """The blocks through the Jinja2 template (experiments/templates/report.html.j2)."""
    return _template().render(title=str(title), blocks=[_html_block(b, base) for b in blocks])


# ---- rendering --------------------------------------------------------------------------------


def render(out: str | Path, figures: bool = True) -> dict[str, Any]:
    """Everything is read from the store and checked first (a damaged store writes nothing), then
    the tables, the provenance, the figures and the report are written."""
    out = Path(out)
    plan, rows, store = load(out)
    try:
        prov = store.provenance()
        timelines = _timelines(plan, store) if figures else {}
    finally:
        store.close()
    runs = P.runs_table(plan, rows)
    res = P.analyse(plan, runs)
    summary, comps, loads = res["summary"], res["comparisons"], res["loads"]
    write_atomic(out / "runs.csv", csv_text(runs))
    kill_point("wrote:runs.csv")
    write_atomic(out / "summary.csv", csv_text(summary))
    write_atomic(out / "comparisons.csv", csv_text(comps))
    write_atomic(out / "load_check.csv", csv_text(loads))
    if prov is not None:
        write_atomic(out / "provenance.json", json.dumps(prov, indent=2, sort_keys=True) + "\n")
    figs = _figures(out, plan, runs, summary, timelines) if figures else []
    blocks = _report_blocks(plan, runs, res, figs) + _provenance_blocks(prov)
    title = f"Sweep report: {plan.name}"
    write_atomic(out / "report.md", render_md(blocks))
    write_atomic(out / "report.html", render_html(title, blocks, out))
    return {"runs": runs, **res, "figures": figs}


def _provenance_blocks(prov: dict[str, Any] | None) -> list:
    if prov is None:
        return [("h2", "Provenance"), ("p", "Not recorded: this store predates provenance records; --resume adds one.")]
    lines = [
        f"invocation {i + 1}{' (--resume)' if s.get('resume') else ''}: wadiloco-sim {s.get('version')}, "
        f"git {s.get('git_revision') or 'not a git checkout'}, {s.get('completed_before', 0)} runs stored before"
        for i, s in enumerate(prov.get("sessions", []))
    ]
    lines.append(
        f"inputs: {prov.get('sweep_file')}, its {len(prov.get('sources', {})) - 1} scenario file(s) and "
        f"{len(prov.get('inputs', {}))} other file(s) the runs read, by sha256; each "
        "regime's resolved scenario and each policy's validated params: provenance.json"
    )
    if prov.get("note"):
        lines.append(prov["note"])
    return [("h2", "Provenance"), ("ul", lines)]


def _figures(out: Path, plan, runs, summary, timelines: dict) -> list[tuple[str, str]]:
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):  # a `$` in a name is a dollar sign
        return _draw(out, plan, runs, summary, timelines)


def _timelines(plan, store: Store) -> dict[tuple, dict]:
    """The stored timelines of the timeline seed's runs (draw 0), by (scenario, label, params) hash."""
    seed, out = plan.timeline_seed, {}
    for r in store.rows(with_timeline=True):
        if r["seed"] == seed and r["draw"] == 0 and r["status"] == "ok" and r.get("timeline"):
            out[(r["scenario_hash"], r["policy_label"], r["params_hash"])] = r["timeline"]
    return out


def _draw(out: Path, plan, runs, summary, by_key: dict) -> list[tuple[str, str]]:
    from wadiloco.experiments import figures as F

    fdir = out / "figures"
    try:
        fdir.mkdir(exist_ok=True)
    except OSError as e:
        raise InputError(fdir, "", f"cannot create the figures folder: {e.strerror or e}") from None
    regimes = [r.name for r in plan.regimes]
    made = []
    if not summary.empty:
        F.sync_excess(summary, regimes, fdir / "sync_excess.png")
        made.append(("figures/sync_excess.png", "sync-excess SLO violation per policy per regime, with bootstrap CIs"))
        F.envelope(summary, runs, regimes, fdir / "envelope.png")
        made.append(("figures/envelope.png", "matched-random envelopes with each policy's mean sync-excess"))
        F.tradeoff(summary, regimes, fdir / "tradeoff.png")
        made.append(("figures/tradeoff.png", "sync-excess SLO violation vs modelled final loss"))
    seed = plan.timeline_seed
    roles = {a.label: a.role for a in plan.arms}
    for reg in plan.regimes:
        tls = {a.label: by_key.get((reg.digest, a.label, a.params_hash)) for a in plan.arms}
        tls = {k: v for k, v in tls.items() if v}
        if not tls:
            continue
        name = f"figures/timeline_{F.slug(reg.name)}.png"
        F.timeline(tls, roles, reg.name, seed, out / name)
        made.append((name, f"timeline of {reg.name}, seed {seed}"))
    return made


def _report_blocks(plan: Plan, runs: pd.DataFrame, res, figs) -> list:
    blocks: list = [("h1", f"Sweep report: {plan.name}")]
    if plan.description:
        blocks.append(("p", plan.description))
    blocks.append(("ul", _overview(plan, runs, res["family"])))
    blocks += [("h2", "Regimes and policies"), ("table", _regimes_table(plan)), ("table", _arms_table(plan))]
    blocks += [("h2", "Load match (common random numbers)"), ("ul", _load_lines(plan, res["loads"]))]
    summary, transfer = res["summary"], res["transfer"]
    for reg in plan.regimes:
        blocks.append(("h2", f"Regime {reg.name}"))
        t = transfer.get(reg.name)
        if t:
            blocks.append(("p", _transfer_text(plan, t)))
        blocks.append(("table", _regime_table(summary[summary["regime"] == reg.name])))
    blocks += _comparison_blocks(res)
    errs = runs[runs["status"] == "error"]
    if len(errs):
        blocks.append(("h2", "Failed runs"))
        blocks.append(("p", "Rerun the sweep with --resume to retry them."))
        blocks.append(("table", errs[["regime", "policy", "seed", "draw", "error"]].head(50)))
    if figs:
        blocks.append(("h2", "Figures"))
        for path, alt in figs:
            blocks += [("h3", alt), ("img", path, alt)]
    blocks += [("h2", "Method"), ("ul", _method(plan))]
    return blocks


def _transfer_text(plan: Plan, t: dict) -> str:
    ci = t["ratio"]
    what = (
        "overlapping a merge / the same requests under no_sync (common random numbers)"
        if t["metric"] == "matched"
        else "overlapping a merge / not overlapping (within each run)"
    )
    if t["window"] == M.COTENANT_WINDOWS:
        what = what.replace("a merge", "a co-tenant window after a merge")
    verdict = {
        G.HARMS: "transfers",
        G.SMALL: f"above 1 but below the gate's {plan.gate.min_p95_ratio:g}: does not transfer",
        G.RELIEVES: "merges relieve serving: does not transfer as harm",
        G.UNMEASURED: "unmeasured",
    }.get(t["state"], "does not transfer")
    se = t["draws_se"]
    se_text = "" if se is None else f" Their sync-excess: {_ci_pct(se.mean, se.low, se.high, se.note, 3)} pts."
    pooled = t["pooled"]
    return (
        f"Effect-size transfer (does random placement move latency?): p95 end-to-end latency of requests "
        f"{what}, on the {t['basis']}: {_ci(ci.mean, ci.low, ci.high, ci.note)} -> {verdict}.{se_text} "
        f"Pooled over all runs with merges: {_ci(pooled.mean, pooled.low, pooled.high, pooled.note)}."
    )


def _comparison_blocks(res) -> list:
    comps = res["comparisons"]
    if comps.empty:
        return []
    c = comps.copy()
    c["mean_rank"] = [f"{x:.3f}" if math.isfinite(x) else "n/a" for x in c["mean_rank"]]
    c["diff_mean"] = [f"{x * 100:+.3f} pts" if math.isfinite(x) else "n/a" for x in c["diff_mean"]]
    for col in ("p_placement", "p_placement_holm", "p_wilcoxon"):
        c[col] = [_p(x) for x in c[col]]
    blocks = [("h2", "Policy vs matched-random comparisons"), ("p", f"Holm family: {res['family']}."), ("table", c)]
    sens = res["sensitivity"].copy()
    if not sens.empty:
        sens["ratio"] = [_ci(m, lo, hi) for m, lo, hi in zip(sens["ratio"], sens["ci_low"], sens["ci_high"])]
        sens = sens.drop(columns=["ci_low", "ci_high"])
        blocks += [
            ("h2", "How the verdicts move with the transfer threshold"),
            (
                "p",
                "The gate's threshold on the p95 ratio is a project choice; here are the policies the gate would "
                "call demonstrated (every other gate unchanged) at other thresholds, with the ratio taken on the "
                "matched-random draws (the gate's basis), pooled over every run with merges, or each policy's own.",
            ),
            ("table", sens),
        ]
    return blocks


def _overview(plan: Plan, runs: pd.DataFrame, family: str) -> list[str]:
    n_total = plan.expected_runs()
    n_ok = int((runs["status"] == "ok").sum())
    n_err = int((runs["status"] == "error").sum())
    b, g = plan.bootstrap, plan.gate
    return [
        f"sweep file: {plan.file or '?'}",
        f"runs: {n_ok} completed, {n_err} failed, {n_total - n_ok - n_err} not run, of {n_total}",
        f"seeds: {len(plan.seeds)} ({plan.seeds[0]}..{plan.seeds[-1]}); timeline seed {plan.timeline_seed}",
        f"bootstrap: {b.method} with {b.n_resamples} resamples, {b.confidence:.0%} "
        f"confidence, resampling seed {b.seed}",
        f"claim gate: placement test one-sided, Holm alpha {g.alpha} over the family of {family}; effect "
        f"transfers when the p95 ratio on the matched-random draws has its CI above 1 and is >= "
        f"{g.min_p95_ratio} (alternatives shown: {', '.join(f'{x:g}' for x in g.transfer_alternatives)}); "
        f"envelope percentiles {list(g.envelope)}",
    ]


def _regimes_table(plan: Plan) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "regime": r.name,
                "scenario": r.path,
                "workload": r.workload,
                "horizon_s": r.horizon_s,
                "scenario_hash": r.digest,
            }
            for r in plan.regimes
        ]
    )


def _arms_table(plan: Plan) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "policy": a.label,
                "name": a.name,
                "role": a.role,
                "draws": a.draws,
                "follows": a.reference or "",
                "regimes": ", ".join(a.regimes or []) or "all",
                "params": ", ".join(
                    f"{k}={v}" for k, v in a.params.items() if k not in ("reference", "reference_params")
                ),
            }
            for a in plan.arms
        ]
    )


def _load_lines(plan: Plan, loads: pd.DataFrame) -> list[str]:
    lines = []
    for reg in plan.regimes:
        lr = loads[loads["regime"] == reg.name]
        if lr.empty:
            lines.append(f"{reg.name}: no completed runs")
        elif lr["matched"].all():
            lines.append(
                f"{reg.name}: every policy saw identical arrivals on all {len(lr)} seeds "
                f"(arrivals hash, {int(lr['runs'].sum())} runs)"
            )
        else:
            bad = lr.loc[~lr["matched"], "seed"].tolist()
            lines.append(f"{reg.name}: MISMATCH on seeds {bad}: policies saw different loads")
    return lines


def _quads(s: pd.DataFrame, stem: str, mean: str | None = None):
    return zip(s[mean or f"{stem}_mean"], s[f"{stem}_ci_low"], s[f"{stem}_ci_high"], s[f"{stem}_note"])


def _regime_table(s: pd.DataFrame) -> pd.DataFrame:
    """One regime's summary rows, formatted for reading (percent points, CIs in brackets, or why none)."""
    return pd.DataFrame(
        {
            "policy": s["policy"],
            "n": s["n_seeds"],
            "violation % [CI]": [_ci_pct(*v) for v in _quads(s, P.VR)],
            "sync-excess pts [CI]": [_ci_pct(*v) for v in _quads(s, P.SE)],
            "p95 ratio [CI]": [_ci(*v) for v in _quads(s, M.P95_RATIO, M.P95_RATIO)],
            "p95 ratio vs no_sync [CI]": [_ci(*v) for v in _quads(s, M.P95_RATIO_MATCHED, M.P95_RATIO_MATCHED)],
            "merges": [f"{m:.1f}" if math.isfinite(m) else "n/a" for m in s[f"{M.MERGES}_mean"]],
            "overlapping requests": [
                f"{m:.0f}" if math.isfinite(m) else "n/a" for m in s[f"{M.OVERLAP_REQUESTS}_mean"]
            ],
            "MR envelope pts": [
                f"[{_pct(lo)}, {_pct(hi)}]" if math.isfinite(lo) else ""
                for lo, hi in zip(s["mr_envelope_low"], s["mr_envelope_high"])
            ],
            "rank vs MR": [f"{x:.3f}" if math.isfinite(x) else "" for x in s["placement_rank"]],
            "p placement": [_p(x) for x in s["p_placement"]],
            "p Holm": [_p(x) for x in s["p_placement_holm"]],
            "p Wilcoxon (secondary)": [_p(x) for x in s["p_wilcoxon"]],
            "verdict": s["verdict"],
        }
    )


def _method(plan: Plan) -> list[str]:
    return [
        "sync-excess = a run's SLO violation rate minus no_sync's on the same regime and seed (paired by seed; "
        "percentage points in the tables); matched controls: mean over draws per seed first",
        "every mean: bootstrap CI over seeds (scipy.stats.bootstrap), as the bootstrap gives it; data without "
        "variance get no interval but a note (all zero, no variance across seeds), fewer than 2 seeds none",
        "p95 ratio: mean over seeds of the p95 latency of requests overlapping a merge, over the mean of "
        "the p95 of those that do not (paired bootstrap); biased upwards, since long requests overlap "
        "merges more often",
        "p95 ratio vs no_sync: the p95 of the requests overlapping a merge over the p95 of the same requests "
        "in the no_sync run on the same seed (common random numbers); the gate's transfer figure is this ratio "
        f"(gate.transfer = {plan.gate.transfer}) on the regime's matched-random draws, i.e. whether random "
        "placement moves latency; where merges act through a co-tenant window after each merge, overlapping "
        "means overlapping that window",
        "policy vs matched-random: the placement test (experiments.stats.placement_test): per seed the "
        "policy's mid-rank among its R + 1 values (violation rates), summed over seeds, with its exact null "
        "distribution (the policy as one more random placement); one-sided (fewer violations); seeds where "
        "every value ties are uninformative and left out; Holm over the sweep's family of tested comparisons. "
        "The two-sided Wilcoxon signed-rank p of the policy minus the mean of the draws is shown as a "
        "secondary figure; it is not calibrated (that difference is skewed under the null)",
        "demonstrated = loads match, the effect transfers, and the placement test against the matched control "
        "has Holm p < alpha",
    ]
