"""The load generator's workload (`loadgen`): inference-perf's `shared_prefix` data sent in `constant` stages,
as the vLLM on H100 experiments ran them (docs/sources.md, inference-perf; docs/serving_validation.md).

- Data: `groups` x `prompts_per_group` fixed prompts, each a group's system prompt and a question of its
  own, wanting exactly `output_tokens` tokens (`ignore_eos`). The prompt list is shuffled once and request
  i of a stage sends prompt i mod (groups x prompts_per_group), counted from 0 in every stage, so after the
  first round every prompt is a repeat. A prompt's tokens as the server counts them: `extra_tokens` +
  `token_ratio` x (system + question) (the generator sends random token ids as text, which the server
  tokenises again) with a spread of `spread` x sqrt(length) per prompt. Block hashes of `block_tokens`
  tokens (the prefix cache's): the group's system prompt blocks are the group's, the rest the prompt's.
- The client's time-out (`timeout_s`, aiohttp's default total of 300 s): a request not answered by then is
  abandoned, queued or running (the engine aborts it: models.engine.serving), and counted as failed.
- Stages: `rate` x `duration_s` requests (a whole number) whose gaps are exponential draws rescaled to sum
  to the stage's duration (a Poisson process conditioned on its count: inference-perf's ConstantLoadTimer),
  the first one gap after the stage starts, the last at its end. inference-perf starts the next stage
  once every request of the last is answered, plus 2 s; here it starts `stage_gap_s` after the last send,
  by default the client's time-out plus 2 s, when every request of the stage is answered or abandoned: on
  an engine as idle, so the stages' latencies are the same.

Randomness: sidecar i's prompt lengths and order from ("tokens", i), its gaps from ("arrivals", i).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from wadiloco.models.errors import InputError
from wadiloco.models.rng import stream
from wadiloco.models.spec.schema import Strict
from wadiloco.models.workload.kinds import Arrivals, Context, WorkloadKind, _check_volume, _register
from wadiloco.models.workload.traces import MAX_TOKENS

STAGE_LEAD_S = 2.0  # inference-perf: `interval` (1 s) after a drained stage, then a 1-s lead to its first send


class SharedPrefixData(Strict):
    """inference-perf's `shared_prefix` data as the generator ran it."""

    groups: int = Field(10, ge=1, le=10_000, description="groups, each with its own system prompt")
    prompts_per_group: int = Field(10, ge=1, le=10_000, description="prompts (questions) per group")
    system_prompt_tokens: int = Field(100, ge=0, le=MAX_TOKENS, description="a system prompt's tokens")
    question_tokens: int = Field(447, ge=1, le=MAX_TOKENS, description="a question's tokens")
    output_tokens: int = Field(248, ge=1, le=MAX_TOKENS, description="tokens every request generates")
    token_ratio: float = Field(1.0, gt=0, le=10, description="server tokens per token asked for (re-tokenised)")
    extra_tokens: int = Field(0, ge=0, le=1024, description="server tokens added to every prompt (BOS, separator)")
    spread: float = Field(0.0, ge=0, le=10, description="a prompt's token-count spread / sqrt(its length)")
    block_tokens: int = Field(16, ge=1, le=4096, description="tokens per block hash (the prefix cache's block)")


class LoadStage(Strict):
    rate: float = Field(gt=0, le=100_000, description="requests per second")
    duration_s: float = Field(gt=0, le=7 * 86400, description="the stage's length (s)")

    @model_validator(mode="after")
    def _sends_some(self):
        if int(self.rate * self.duration_s) < 1:
            raise ValueError("the stage sends no request (rate x duration_s < 1)")
        return self


class LoadgenParams(Strict):
    kind: Literal["loadgen"] = "loadgen"
    data: SharedPrefixData = Field(SharedPrefixData(), description="the prompts")
    stages: list[LoadStage] = Field(
        [LoadStage(rate=5.0, duration_s=300.0)], min_length=1, max_length=1000, description="constant-rate stages"
    )
    stage_gap_s: float = Field(302.0, ge=0, le=86400, description="from a stage's last send to the next's start (s)")
    timeout_s: float | None = Field(
        300.0, gt=0, le=86400, description="the client gives a request up this long after sending it (s); null: never"
    )

    def span_s(self) -> float:
        """From the first stage's start to the last stage's last send."""
        return sum(s.duration_s for s in self.stages) + self.stage_gap_s * (len(self.stages) - 1)


def stage_sends(rate: float, duration: float, rng: np.random.Generator) -> np.ndarray:
    """A stage's send times from its start: int(rate x duration) exponential gaps rescaled to the duration."""
    gaps = rng.exponential(1.0 / rate, int(rate * duration))
    gaps *= duration / gaps.sum()
    t = np.cumsum(gaps)
    t[-1] = duration  # (the last send is the stage's end, whatever the rounding of the sum)
    return t


class Prompts:
    """One sidecar's prompt set: each prompt's tokens and block hashes, and the order they are sent in."""

    def __init__(self, d: SharedPrefixData, rng: np.random.Generator):
        n = d.groups * d.prompts_per_group
        asked = d.system_prompt_tokens + d.question_tokens
        mean = d.extra_tokens + d.token_ratio * asked
        self.tokens = np.maximum(1, np.rint(mean + d.spread * math.sqrt(asked) * rng.standard_normal(n)))
        self.tokens = self.tokens.astype(np.int64)
        shared = int((min(d.extra_tokens, 1) + d.token_ratio * d.system_prompt_tokens) // d.block_tokens)
        width = int(self.tokens.max()) // d.block_tokens + 1  # hash ids: (owner, block) as owner * width + block
        self.hashes = []
        for j in range(n):
            group = j // d.prompts_per_group
            blocks = int(self.tokens[j]) // d.block_tokens
            own = (d.groups + j) * width
            self.hashes.append(tuple(group * width + b if b < shared else own + b for b in range(blocks)))
        self.order = rng.permutation(n)

    def __len__(self) -> int:
        return len(self.order)


def build(p: LoadgenParams, ctx: Context) -> list[Arrivals]:
    """Every sidecar runs the whole schedule, with streams of its own."""
    if p.span_s() >= ctx.horizon_s:
        raise InputError(
            ctx.file, "workload.stages", f"the stages span {p.span_s():g} s, not within horizon_s ({ctx.horizon_s:g})"
        )
    _check_volume(sum(int(s.rate * s.duration_s) for s in p.stages), ctx.file, "workload.stages")
    out = []
    for i in range(ctx.n_sidecars):
        prompts = Prompts(p.data, stream(ctx.seed, "tokens", i))
        rng = stream(ctx.seed, "arrivals", i)
        times, which, start = [], [], 0.0
        for s in p.stages:
            t = start + stage_sends(s.rate, s.duration_s, rng)
            times.append(t)
            which.append(prompts.order[np.arange(len(t)) % len(prompts)])  # restarting at 0 every stage
            start = t[-1] + p.stage_gap_s
        t, j = np.concatenate(times), np.concatenate(which)
        prompt = prompts.tokens[j]
        output = np.full(len(t), p.data.output_tokens, dtype=np.int64)
        out.append(Arrivals(t, prompt, output, tuple(prompts.hashes[k] for k in j)))
    return out


_register(
    WorkloadKind(
        "loadgen",
        LoadgenParams,
        build,
        "The load generator inference-perf: its shared_prefix data (groups sharing a system prompt, a question "
        "per prompt, a fixed output length, prompts cycled in a shuffled order from 0 every stage) in constant "
        "stages (rate x duration_s requests, exponential gaps rescaled to the stage), stages stage_gap_s apart.",
    )
)
