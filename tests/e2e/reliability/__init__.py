"""Helpers of the reliability tests (``tests/e2e/reliability/test_reliability_*.py``): local Ray clusters, spaces,
process and lock inspection by pid, GPU usage records, and the outcome log behind
``docs/reliability.md``."""
