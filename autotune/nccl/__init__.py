"""The NCCL all-reduce probe: candidates, the worker processes that time them, the emulator's model."""
