"""What `wadiloco calibrate PROFILE` prints: a profile's fitted numbers and its in-sample check."""

from __future__ import annotations

from wadiloco.models.engine.profiles import Profile


def profile_dict(p: Profile) -> dict:
    """The fitted profile as plain data (for --json)."""
    from wadiloco.models.testbed import fit

    return {
        "profile": p.spec.name,
        "source": p.source,
        "gpu": p.spec.gpu,
        "engine": p.spec.engine,
        "relative_batch_slope": p.relative_slope,
        "models": {
            name: {
                "a_s": m.a,
                "d_s": m.d,
                "start_delay_s": m.start_delay_s,
                "reference_batch": m.reference_batch,
                "runs": list(m.runs),
            }
            for name, m in p.models.items()
        },
        "cotenants": {name: {"weight": w, "runs": p.spec.cotenants[name].runs} for name, w in p.cotenants.items()},
        "in_sample": [
            {
                "run": r["run"],
                "L_u_ms": r["fit"].l_u * 1e3,
                "L_s_ms": r["fit"].l_s * 1e3,
                "start_delay_s": r["fit"].start_delay,
                "how": r["fit"].how,
                "rel_err": r["rel_err"],
                "measured": r["measured"],
                "simulated": r["simulated"],
            }
            for r in fit.in_sample()
        ],
    }


def profile_lines(p: Profile, h200_outer: float) -> list[str]:
    d = profile_dict(p)
    lines = [
        f"Profile {p.spec.name} ({p.source})",
        f"  {p.spec.gpu}; {p.spec.engine}",
        "Engine iteration (GPU-bound twin: GPU time a + d*batch, no host part), per model:",
    ]
    for name, m in p.models.items():
        its = ", ".join(f"c={c}: {m.iteration_s(c) * 1e3:.3f} ms" for c in (1, 4, 8, 12))
        lines.append(
            f"  {name:24s} a {m.a * 1e3:.4f} ms  d {m.d * 1e6:.2f} us/seq  ({its});"
            f" start delay {m.start_delay_s:.2f} s; from {', '.join(m.runs)}"
        )
    lines.append(
        f"  batch growth: {p.relative_slope:.2%} of an iteration per extra sequence "
        f"(from {', '.join(p.spec.batch_slope.runs) if p.spec.batch_slope else 'none: assumed flat'})"
    )
    lines.append(
        "Saturating co-tenants on the serving GPU (weight vs a serving job of weight 1; the serving job keeps 1/(1+w)):"
    )
    for name, w in p.cotenants.items():
        lines.append(
            f"  {name:22s} w = {w:.4f}  (keeps {1 / (1 + w):.3f})  from {', '.join(p.spec.cotenants[name].runs)}"
        )
    lines.append(
        f"  for comparison, the H200 `outer` rows (fp32 outer step, another saturating co-tenant): w = {h200_outer:.4f}"
    )
    lines.append("In sample (Stage 10): simulated vs measured, relative error")
    lines.append(
        f"  {'run':26s} {'L_u ms':>8s} {'L_s ms':>8s} {'requests':>9s} {'p50':>7s} {'p95':>7s} {'p99':>7s} "
        f"{'tok/s':>7s} {'sync':>7s} {'hi/lo':>7s} {'corr sim/meas':>14s}"
    )
    for r in d["in_sample"]:
        e = r["rel_err"]
        lines.append(
            f"  {r['run']:26s} {r['L_u_ms']:8.1f} {r['L_s_ms']:8.1f} {e['requests']:+9.2%} {e['p50_ms']:+7.2%} "
            f"{e['p95_ms']:+7.2%} {e['p99_ms']:+7.2%} {e['tokens_per_s']:+7.2%} {e['sync_ratio']:+7.2%} "
            f"{e['high_low_ratio']:+7.2%} {r['simulated']['corr']:6.3f}/{r['measured']['corr']:.3f}"
        )
    return lines
