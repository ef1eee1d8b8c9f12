"""``python -m autotune.nccl_probe``: the module entry of ``autotune probe`` (:mod:`autotune.cli.probe`).

What is measured and how candidates are ranked is :mod:`autotune.nccl.probe`'s; see
``docs/nccl-probe.md``.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from autotune import command_line as cli
    from autotune.cli.probe import main

    sys.exit(cli.run_main(main))
