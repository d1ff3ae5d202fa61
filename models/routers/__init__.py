"""Routers in front of the sidecars: a new router is one module here, registered with `@register`
(routers.base) and imported below; `router.name` in a scenario, `wadiloco routers` lists them."""

from __future__ import annotations

from wadiloco.models.routers import (  # noqa: F401  (imported to register)
    least_kv,
    least_outstanding,
    merge_aware,
    prefix_affinity,
    round_robin,
    static,
    uniform,
)
from wadiloco.models.routers.base import ROUTERS, Params, Router, RouterView, describe_routers, parse_router, register

__all__ = ["ROUTERS", "Params", "Router", "RouterView", "describe_routers", "parse_router", "register"]
