"""static: the workload's own dealing (round robin, random or hash: workload `spread`), fixed
before the run; no router runs (today's engine, byte for byte)."""

from __future__ import annotations

from wadiloco.models.routers.base import Router, register


@register
class Static(Router):
    name = "static"
    summary = "the workload's own dealing (workload.spread), decided before the run; no router process"
    static = True
