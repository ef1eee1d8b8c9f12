"""Fitting an emulator profile to measured trials (``python -m autotune.simtools.fit``)."""
