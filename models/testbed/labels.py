"""The testbed's labels on every request and its own figures of a labelled run (`testbed_labels:`).

The scenario block `testbed_labels:` (models.spec.scenario.LabelsConfig) becomes a `LabelPlan`, the
run's result extra (models.results.run `Extra`) that models/testbed/plugin.py registers for that
block: it labels each request at its start (a closed loop's batch start, as the testbed reads them,
docs/sources.md testbed 2.6) and adds the testbed's summary of the run under `testbed`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wadiloco.models.cotenant import TimetablePlan, check_timetable, timetable_plan
from wadiloco.models.results.run import NoExtra
from wadiloco.models.spec.scenario import BurstyTimetable, LabelsConfig, PressureTimetable
from wadiloco.models.testbed.metrics import summarize
from wadiloco.models.testbed.pressure import HIGH_PRESSURE, bursty_labels, max_pressure
from wadiloco.models.timetables import bursty

# The label columns, only in the request table of a scenario with `testbed_labels:`: whether a request
# started in a sync window, and with a pressure source, the max pressure at its start and whether
# that is high.
LABEL_COLUMNS = ("sync_active", "max_pressure", "high_pressure")


@dataclass(frozen=True, eq=False)
class LabelPlan(NoExtra):
    """`testbed_labels:` resolved: the sync timetable, the pressure source (or None) and the horizon."""

    sync: TimetablePlan
    pressure: PressureTimetable | BurstyTimetable | None
    horizon_s: float

    def labels(self, t: np.ndarray, merge_ends: np.ndarray) -> dict[str, np.ndarray]:
        """The label columns of requests that start at `t`."""
        out = {"sync_active": self.sync.active(t, merge_ends)}
        p = self.pressure
        if isinstance(p, PressureTimetable):
            out["max_pressure"] = max_pressure(t, p.period_s)
            out["high_pressure"] = out["max_pressure"] >= p.threshold
        elif isinstance(p, BurstyTimetable):
            busy = bursty(p.period_s, p.window_s, p.phase_s, horizon=self.horizon_s).active(t)
            out["max_pressure"] = np.maximum.reduce(bursty_labels(busy))
            out["high_pressure"] = out["max_pressure"] >= HIGH_PRESSURE
        return out

    def columns(self, req: dict[str, np.ndarray], merges: Sequence) -> Mapping[str, np.ndarray]:
        return self.labels(req["arrival"], np.array([m.end for m in merges], dtype=float))

    def summary(self, req: dict[str, np.ndarray], merges: Sequence) -> dict[str, Any]:
        return {"testbed": testbed_figures(req, len(merges))}


def label_plan(lab: LabelsConfig, horizon: float, base_dir: str, file: object) -> LabelPlan:
    sync = timetable_plan(lab.sync, horizon, base_dir, file, "testbed_labels.sync")
    return LabelPlan(sync, lab.pressure, horizon)


def check_labels(lab: LabelsConfig, horizon: float, base_dir: str, file: object) -> None:
    """The input errors of `label_plan` (its sync timetable's), found when the scenario loads."""
    check_timetable(lab.sync, horizon, base_dir, file, "testbed_labels.sync")


def testbed_figures(r: dict[str, np.ndarray], merges: int) -> dict[str, Any]:
    """The testbed's own summary of a labelled run (models.testbed.metrics.summarize: request-weighted
    percentiles, bins read at batch start), over completed requests, plus `slo_pct`: the share of all
    requests that violate (the table's `violated`: unfinished, or over an SLO), in percent."""
    done = r["completed"]
    press = r["max_pressure"][done] if "max_pressure" in r else np.zeros(int(done.sum()))
    out = summarize(r["arrival"][done], r["e2e"][done], r["output"][done], r["sync_active"][done], press)
    out["slo_pct"] = 100.0 * float(np.mean(r["violated"])) if len(r["violated"]) else math.nan
    out["merges"] = merges
    return out
