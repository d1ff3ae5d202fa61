"""Pure building blocks of a simulated twin of the paper's real vLLM testbed (Stages 10-13).

The testbed (docs/sources.md, testbed 1) is one B200 serving closed-loop batches of fixed prompts with vLLM,
time-shared with a matmul "stress" process that follows a timetable. The twin calibrates on Stage 10
(section 6) and predicts Stages 11-13, whose measured outcomes are deliberately not used anywhere.
This package holds the plain, SimPy-free parts (numpy only), each with its source:

- `prompts`: the prompt sets as token lengths per slot, and output lengths (2.3; token counts are the
  artifact's word-count estimates, characters are exact);
- `timetables`: exact on/off timetables and membership rules: Stage 10's periodic sync windows (3.3),
  the pressure schedule (3.2) and its values, replayed sync windows with the repeat wrap (3.4), the
  bursty busy test, c(t) and labels (2.4, 2.6);
- `stage12`: Stage 12's generated schedules, reproduced exactly (3.6);
- `harness`, `harness_policies`, `harness_fit`: a simulated DiLoCo stress harness that rebuilds the
  unreleased training traces replayed in Stages 11-13, fitted to their merge counts and lengths (3.5).
"""
