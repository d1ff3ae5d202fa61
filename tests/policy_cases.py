"""Policies drawn from the registry, so a new policy is covered without editing a list.

Tests choose policies by their declared capabilities (`respects_corridor`, `oracle`, ...), never
by name. Each runs with its defaults, except that integer parameters its own `check_corridor`
rejects under the test's scaled-down corridor are set to a cadence inside it (fixed's H=256 under
[24, 64], say). A policy whose defaults cannot be made to fit that way fails, at run time, the one
test that uses it, which is where its author should look.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wadiloco.models.policies import POLICIES


def registered(keep: Callable[[type], bool]) -> list[str]:
    """Names of the registered policies whose class `keep` accepts, sorted."""
    return [n for n in sorted(POLICIES) if keep(POLICIES[n])]


def corridor_params(name: str, h_min: int, h_max: int, cadence: int) -> dict[str, Any]:
    """`name`'s default params, with integer fields outside [h_min, h_max] set to `cadence` when the
    policy's own corridor check objects to the defaults."""
    cls = POLICIES[name]
    p = cls.Params()
    if cls.check_corridor(p, h_min, h_max) is None:
        return {}
    fix = {
        k: cadence
        for k in cls.Params.model_fields
        if type(getattr(p, k)) is int and not h_min <= getattr(p, k) <= h_max
    }
    problem = cls.check_corridor(cls.Params(**fix), h_min, h_max)
    assert problem is None, f"policy {name!r}: its defaults do not fit the corridor [{h_min}, {h_max}]: {problem}"
    return fix
