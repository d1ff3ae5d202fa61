"""A sidecar's serving capacity from its latency law, so load can be stated as utilisation.

At saturation the batch holds B = `max_num_seqs` requests. By Little's law each request holds a
slot for about `mean_output` iterations, so requests finish at lambda = B / (O * T) per second,
where T is the iteration time. Each iteration then carries B decode tokens and lambda*T*P = B*P/O
prefill tokens; its GPU part g is the law's mean iteration of such an engine
(models.engine.laws `saturated`: for the linear law a + B * (b*P/O + c*(P + O/2) + d)); the host
part h runs beside it and T = max(h, g) (with an EngineStep: max(h, f, g) overlapped, h + g + f
sequential). If the prefill share exceeds the token budget, the budget binds instead. Regimes then
mean the same thing when the latency law or engine settings change; tests check that a simulated
sidecar keeps up just below this rate and falls behind above it.
"""

from __future__ import annotations

from wadiloco.models.engine.batching import TODAYS_STEP, EngineStep, compose
from wadiloco.models.engine.laws import LatencyLaw, law_of


def sidecar_capacity_rps(
    law: LatencyLaw,
    max_num_seqs: int,
    host_s: float,
    mean_prompt: float,
    mean_output: float,
    max_num_batched_tokens: int | None = None,
    step: EngineStep = TODAYS_STEP,
) -> float:
    """Requests per second a saturated sidecar finishes; `law` a latency law (or a fitted model,
    models.engine.latency.LatencyModel, taken as its law)."""
    B = max_num_seqs
    P, O = mean_prompt, max(mean_output, 1.0)  # noqa: E741 (the formula's own letters)
    prefill_per_iter = B * P / O
    if max_num_batched_tokens is not None and prefill_per_iter > max_num_batched_tokens - B:
        prefill_per_iter = max(1.0, max_num_batched_tokens - B)
        B = prefill_per_iter * O / P  # the budget, not the slots, limits admissions
    g = law_of(law).saturated(B, P, O, prefill_per_iter)
    # host work h0 + h1*batch + h2*tokens, frontend work per admitted request and output token
    h = host_s + step.host_per_seq_s * B + step.host_per_token_s * (B + prefill_per_iter)
    f = step.front_per_request_s * B / O + step.front_per_token_s * B
    G, H = compose(g, h, f, step.sequential)
    T = max(H, G)
    return B / (O * T)
