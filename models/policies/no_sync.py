"""`no_sync`: never merge. Every claim is measured against it (same seed, same load)."""

from wadiloco.models.policies.base import Observation, Policy
from wadiloco.models.policies.registry import register


@register
class NoSync(Policy):
    name = "no_sync"
    respects_corridor = False
    summary = "never merges; the load-match baseline"

    def decide(self, obs: Observation) -> bool:
        return False
