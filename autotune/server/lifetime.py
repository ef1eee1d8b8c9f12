"""When a server held its GPUs: :class:`Lifetime`, the start-up and teardown clock of a
:class:`~autotune.server.process.ServerProcess`.

Kept by the server itself because only it sees where a failed start's own teardown begins (a
start-up timeout stops the group before it raises): the GPU bill
(:mod:`autotune.trial.gpu_time`) then counts start-up and teardown apart on every path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Lifetime"]


class Lifetime:
    """Start-up and teardown seconds of one server (``time.monotonic``).

    Attributes:
        startup_s: Spawn to healthy, or to the end of a failed start less its teardown; None
            before ``start()`` ended (or when it never ran).
        teardown_s: Seconds spent stopping the process group, every stop together; None when no
            process was ever stopped.
        stop_began: When the first stop of a live launch began; None before.
    """

    def __init__(self) -> None:
        self._began: float | None = None
        self.startup_s: float | None = None
        self.teardown_s: float | None = None
        self.stop_began: float | None = None

    def began(self) -> None:
        """``start()`` was called: the spawn is next."""
        self._began = time.monotonic()

    def started(self) -> None:
        """``start()`` ended, ready or failed (after a failed start's stop): start-up is what it
        took less the teardown inside it."""
        if self._began is None or self.startup_s is not None:
            return
        self.startup_s = max(time.monotonic() - self._began - (self.teardown_s or 0.0), 0.0)

    @contextmanager
    def stopping(self) -> Iterator[None]:
        """Time one stop of a launched process group, SIGTERM to the group reaped."""
        began = time.monotonic()
        if self.stop_began is None:
            self.stop_began = began
        try:
            yield
        finally:
            self.teardown_s = (self.teardown_s or 0.0) + (time.monotonic() - began)
