"""The phase profile: draft, verify, re-extend and other, from SGLang's /metrics."""
