"""A simulated twin of the paper's real vLLM testbed (Stages 10-13), as a plug-in of the core.

The testbed (docs/sources.md, testbed 1) is one B200 serving closed-loop batches of fixed prompts
with vLLM, time-shared with a matmul "stress" process that follows a timetable. The twin calibrates
on Stage 10 (testbed 6) and predicts Stages 11-13, whose measured outcomes are deliberately not used
anywhere. The core never imports this package: `plugin` registers what it adds into the core's
registries (models.plugins). Its parts, plain and SimPy-free (numpy only), each with its source:

- `prompts`: the prompt sets as token lengths per slot, and output lengths (testbed 2.3; token counts
  are the artifact's word-count estimates, characters are exact);
- `pressure`: the pressure schedule and its values (3.2), the bursty labels and c(t) (2.4, 2.6);
- `labels`: the per-request labels and the testbed's own figures of a run (`testbed_labels:`, 2.6, 5);
- `fit`, `fluid`, `metrics`: the Stage 10 fit on a two-level fluid, and the testbed's summary;
- `replay`: the policy that replays sync schedules (3.4-3.6); `stage12`: Stage 12's generated
  schedules, reproduced exactly (3.6);
- `harness`, `harness_policies`, `harness_fit`: a simulated DiLoCo stress harness that rebuilds the
  unreleased training traces replayed in Stages 11-13, fitted to their merge counts and lengths (3.5).

Timetables that are not the testbed's own (periodic windows, the bursty busy test, replayed windows)
are the core's: models.timetables.
"""
