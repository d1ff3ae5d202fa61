"""The testbed twin as a plug-in: everything it adds to the core, registered in one place.

The core never imports the testbed; its registries import this module before they are first read
(models.plugins). What it registers, each into the core's registry of that kind:
- the prompt sets `short`, `mixed` and `long` (models.workload.prompt_sets), a closed loop's `prompts:`;
- the timetable kind `pressure`, the testbed's pressure schedule (models.cotenant.TIMETABLES);
- the scenario block `testbed_labels:`, resolved into the labels and the testbed's own figures of a
  run (models.results.blocks);
- the measurements `testbed/stage10.yaml` an engine profile is fitted from (models.engine.profiles);
- the merge policy `replay` (models.policies).
"""

from __future__ import annotations

from wadiloco.models.cotenant import register_timetable
from wadiloco.models.engine.profiles import register_measurements
from wadiloco.models.policies.registry import register as register_policy
from wadiloco.models.results.blocks import register_block
from wadiloco.models.testbed import fit, labels, prompts, replay
from wadiloco.models.testbed.pressure import pressure
from wadiloco.models.workload.prompt_sets import register as register_prompt_set

for _name in ("short", "mixed", "long"):
    register_prompt_set(prompts.PROMPT_SETS[_name])
register_timetable("pressure", lambda s, h: pressure(s.period_s, horizon=h, threshold=s.threshold))
register_block("testbed_labels", labels.check_labels, labels.label_plan)
register_measurements(fit.STAGE10, fit.Stage10())
register_policy(replay.Replay)
