"""Training progress: a loss curve in tokens seen, with a penalty for long merge intervals.

Heuristic, labelled as such. The curve is the Chinchilla parametric fit
L(N, D) = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022, "Training Compute-Optimal Large Language
Models", approach 3: E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28). DiLoCo (Douillard et al.
2023, table/figure on H) reports about +3% perplexity going from H=50 to H=1000 inner steps at 150M
parameters, less for larger models: that is ln(1.03)/ln(1000/50) = 0.0099 nats of loss per e-fold
of H. We add that much per e-fold of the token-weighted mean merge interval above 50 steps.
Islands that have not merged yet have only their own tokens: unmerged progress is not pooled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

E, A, B, ALPHA, BETA = 1.69, 406.4, 410.7, 0.34, 0.28
H_REF = 50.0
PENALTY_PER_EFOLD = math.log(1.03) / math.log(1000 / 50)


def chinchilla_loss(params: float, tokens: float) -> float:
    return E + A / params**ALPHA + B / max(tokens, 1.0) ** BETA


def interval_penalty(mean_interval_steps: float) -> float:
    if mean_interval_steps <= H_REF:
        return 0.0
    return PENALTY_PER_EFOLD * math.log(mean_interval_steps / H_REF)


@dataclass
class ProgressModel:
    """Tokens banked by merges and the loss they buy."""

    params: float
    tokens_per_step: float  # per island
    islands: int
    initial_tokens: float = 0.0
    merged_tokens: float = 0.0
    weighted_interval: float = 0.0  # sum of interval * tokens, for the token-weighted mean

    @property
    def tokens_at_last_merge(self) -> float:
        return self.initial_tokens + self.merged_tokens

    def loss_at(self, tokens: float, mean_interval: float) -> float:
        return chinchilla_loss(self.params, tokens) + interval_penalty(mean_interval)

    def mean_interval(self) -> float:
        return self.weighted_interval / self.merged_tokens if self.merged_tokens else 0.0

    def dloss_if_merged(self, steps: int) -> float:
        """Loss reduction that merging an island's `steps` unmerged steps (fleet-wide) would bank."""
        base = self.tokens_at_last_merge
        gained = steps * self.tokens_per_step * self.islands
        return chinchilla_loss(self.params, base) - chinchilla_loss(self.params, base + gained)

    def record_merge(self, interval_steps: int) -> None:
        toks = interval_steps * self.tokens_per_step * self.islands
        self.merged_tokens += toks
        self.weighted_interval += interval_steps * toks

    def final_loss(self, unmerged_steps: int) -> float:
        """Loss of one island's model at the end of the run.

        Merged rounds pooled every island's tokens (at the interval penalty of their H); steps since
        the last merge have only been seen by the island itself, so they count once, not once per
        island. That is what merging buys, and why never merging (`no_sync`) learns least."""
        toks = self.merged_tokens + unmerged_steps * self.tokens_per_step
        return self.loss_at(self.initial_tokens + toks, self.mean_interval())
