"""Ray's own log lines during a search go to the run folder, not the console.

Ray sets up its ``ray`` logger with a handler on stderr. During a search that handler would put
Ray Tune's lines among the table's rows: on Ctrl-C its ``Tuner.restore(path=..., trainable=...)``
hint (which contradicts the one resume command autotune prints) and the ``FileNotFoundError``
warnings of a stop mid-checkpoint. :func:`ray_lines_to` sends them to ``ray.log`` in the run
folder for the search's duration and gives the handlers back after it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["RAY_LOG", "ray_lines_to"]

#: The file in a search's run folder that keeps Ray's log lines.
RAY_LOG = "ray.log"


@contextmanager
def ray_lines_to(path: Path) -> Iterator[Path]:
    """Within the block, the ``ray`` logger (Ray Tune's loggers included) writes to ``path`` only.

    The file is created on the first line (none: no file). Yields ``path``.
    """
    logger = logging.getLogger("ray")
    saved, propagate = list(logger.handlers), logger.propagate
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for h in saved:
        logger.removeHandler(h)
    logger.addHandler(handler)
    logger.propagate = False  # the root logger's handlers (a lastResort on stderr) stay out too
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        handler.close()
        for h in saved:
            logger.addHandler(h)
        logger.propagate = propagate
