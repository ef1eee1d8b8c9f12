"""autotune: find the fastest SGLang speculative-decoding setup, and prove it with measurements."""

__version__ = "0.1.0"
