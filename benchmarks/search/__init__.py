"""The sampler benchmark (``python -m benchmarks.search``, also ``python -m autotune.bench_search`` in
a checkout): the peers' strategies, the recorded and synthetic landscapes it runs on, and the noise
it draws. Research code, so it depends on autotune and autotune does not ship it."""
