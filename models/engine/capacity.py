"""A sidecar's serving capacity from the latency model, so load can be stated as utilisation.

At saturation the batch holds B = `max_num_seqs` requests. By Little's law each request holds a
slot for about `mean_output` iterations, so requests finish at lambda = B / (O * T) per second,
where T is the iteration time. Each iteration then carries B decode tokens and lambda*T*P = B*P/O
prefill tokens, so the GPU part is g = a + B * (b*P/O + c*(P + O/2) + d); the host part h runs
beside it and T = max(h, g) (with an EngineStep: max(h, f, g) overlapped, h + g + f
sequential). If the prefill share exceeds the token budget, the budget binds
instead. Regimes then mean the same thing when the latency model or engine settings change;
tests check that a simulated sidecar keeps up just below this rate and falls behind above it.
"""

from __future__ import annotations

from wadiloco.models.engine.batching import TODAYS_STEP, EngineStep, compose
from wadiloco.models.engine.latency import LatencyModel


def sidecar_capacity_rps(
    lat: LatencyModel,
    max_num_seqs: int,
    host_s: float,
    mean_prompt: float,
    mean_output: float,
    max_num_batched_tokens: int | None = None,
    step: EngineStep = TODAYS_STEP,
) -> float:
    B = max_num_seqs
    P, O = mean_prompt, max(mean_output, 1.0)  # noqa: E741 (the formula's own letters)
    prefill_per_iter = B * P / O
    if max_num_batched_tokens is not None and prefill_per_iter > max_num_batched_tokens - B:
        prefill_per_iter = max(1.0, max_num_batched_tokens - B)
        B = prefill_per_iter * O / P  # the budget, not the slots, limits admissions
    g = lat.a + lat.b * prefill_per_iter + lat.c * B * (P + O / 2) + lat.d * B
    # attention form: a prompt of P tokens makes P(P+1)/2 causal pairs however it is chunked, B/O
    # prompts start per iteration (0 for the linear form, exactly)
    g += lat.e * (B / O) * (P * (P + 1) / 2)
    # host work h0 + h1*batch + h2*tokens, frontend work per admitted request and output token
    h = host_s + step.host_per_seq_s * B + step.host_per_token_s * (B + prefill_per_iter)
    f = step.front_per_request_s * B / O + step.front_per_token_s * B
    G, H = compose(g, h, f, step.sequential)
    T = max(H, G)
    return B / (O * T)
