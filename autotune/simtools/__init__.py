"""The emulator's tools: its model replayed over a space in process (``evaluate``) and a profile
fitted to measured trials (``fit``). They read spaces and trial records, so they sit after
``space/`` and ``tracking/``; the emulator itself (``sim/``) imports only ``sglang/``."""
