"""The sampler benchmark (``python -m autotune.bench_search``) and the landscapes it runs on."""
