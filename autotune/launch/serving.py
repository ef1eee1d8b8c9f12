"""The launch a user should serve with, from the launch a trial measured.

One place decides it; the search's console and ``summary.md`` (through each trial's
``serve_command``) and ``python -m autotune.export`` all print what this returns, so they cannot
disagree. A trial's launch carries three things that are measuring devices, not serving settings:
its trial-only args (``measure.fast_start``'s prefill-graph switch), the emulator's variables, and
SGLang's forced accept length for dummy weights.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.backend import is_emulator_env
from autotune.launch.spec import LaunchSpec
from autotune.sglang.metrics import DEVICE_TIMER_ENV
from autotune.sglang.speculative import SIMULATE_ACC_LEN_ENV


def serving_spec(spec: LaunchSpec, *, strip_metrics: bool = False, host: str | None = None,
                 port: int | None = None) -> LaunchSpec:
    """The launch on real SGLang: backend ``sglang``, no emulator variables, no forced accept
    length, no fixed port, and none of the trial's trial-only args.

    ``--enable-metrics`` and the device timer stay unless ``strip_metrics``: the numbers were
    measured with them.

    Args:
        spec: The launch a trial ran (any backend).
        strip_metrics: Drop ``--enable-metrics`` and the device-timer variable.
        host: Bind address; the trial's if None.
        port: Port; SGLang's default if None.
    """
    spec = spec.without_trial_only()
    env = {k: v for k, v in spec.env.items()
           if not is_emulator_env(k) and k != SIMULATE_ACC_LEN_ENV}
    args = dict(spec.server_args)
    if strip_metrics:
        env.pop(DEVICE_TIMER_ENV, None)
        args.pop("enable_metrics", None)
    return replace(spec, backend="sglang", env=env, server_args=args, host=host or spec.host, port=port)
