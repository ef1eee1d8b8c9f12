"""Benchmarks that prove the measuring instrument and the emulator's calibration.

Each is a command that prints its figures (medians and spreads, ratios measured side by side in one
run); ``--quick`` runs a tiny version for tests, ``--json PATH`` also writes the figures as JSON.

- ``python -m benchmarks.calibration``: the calibration points of REFERENCE.md §3, from the model
  and from a live emulator measured by :mod:`autotune.trial.measure`.
- ``python -m benchmarks.trial_accuracy``: a trial's tok/s, accept length and phase shares against
  the model's noise-free expectation, for both built-in profiles at concurrency 1 and 8.
- ``python -m benchmarks.client_ceiling``: how many streamed tokens/s the benchmark client sustains
  on one core, against a zero-compute emulator.
- ``python -m benchmarks.profile_overhead``: what turning the phase profile on costs in tok/s.
- ``python -m benchmarks.search`` (also ``python -m autotune.bench_search``): the sampler benchmark,
  trials to the optimum per search strategy, the peers' included (``benchmarks/search/``, its
  landscapes in ``benchmarks/landscapes/``).

``docs/benchmarks.md`` describes them and keeps the figures they gave.
"""
