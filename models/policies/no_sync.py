"""`no_sync`: never merge. Every claim is measured against it (same seed, same load)."""

from wadiloco.models.policies.base import NEVER, Observation, Policy
from wadiloco.models.policies.registry import register


@register
class NoSync(Policy):
    name = "no_sync"
    respects_corridor = False
    summary = "never merges; the load-match baseline"

    def decide(self, obs: Observation) -> bool:
        return False

    def next_merge(self, step: int, last_merge_step: int) -> int:
        return NEVER

    @classmethod
    def schedule_work(cls, params, horizon_s: float, step_time_s: float, base_dir: str):
        return 0.0, 0.0  # (no merge: the run-size estimate counts none)
