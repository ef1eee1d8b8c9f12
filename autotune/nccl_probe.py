"""``python -m autotune.nccl_probe``: rank NCCL settings by all-reduce latency at a model's sizes.

The command: its arguments, a space's candidates (``--space``) or a file's, and the report. What
is measured and how candidates are ranked is :mod:`autotune.nccl.probe`'s; see
``docs/nccl-probe.md``. It sits above ``space/`` in the layout (reading a space's candidates), which
is why it is not part of ``nccl/``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from autotune import command_line as cli
from autotune.errors import AutotuneError, ConfigError
from autotune.nccl.candidates import forbids_nvls, load_candidates
from autotune.nccl.probe import BACKENDS, ProbeSettings, format_table, run_probe
from autotune.space.nccl_candidates import candidates_from_space, hidden_of_space
from autotune.space.packaged import SPACE_HELP
from autotune.space.search_space import load_space

__all__ = ["main"]


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one token count")
    return values


def _parser() -> argparse.ArgumentParser:
    p = cli.command_parser("python -m autotune.nccl_probe", __doc__, examples=[
        "python -m autotune.nccl_probe --space demo --tp 8 --backend sim",
        "python -m autotune.nccl_probe --candidates candidates.yaml --tp 2 --hidden 7168 "
        "--backend nccl --json -o nccl-probe.json"])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--candidates", help="candidates file (YAML or JSON; docs/nccl-probe.md)")
    src.add_argument("--space", help=SPACE_HELP + "; probe its NCCL_* parameter combinations")
    p.add_argument("--tp", type=int, required=True, help="ranks (GPUs) of the all-reduce")
    p.add_argument("--hidden", type=int, help="hidden size (default with --space: "
                   "nccl_prescreen.hidden, the sim profile's, or the model's config.json)")
    p.add_argument("--tokens", type=_int_list, default=(1, 4, 8, 64),
                   help="token counts, comma-separated (default 1,4,8,64)")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--iters", type=int, default=200, help="timed all-reduces per size")
    p.add_argument("--warmup", type=int, default=20, help="untimed all-reduces per size first")
    p.add_argument("--batch", type=int, default=10,
                   help="back-to-back all-reduces per timed sample, ranks met first; 1 times each "
                        "call alone (default 10)")
    p.add_argument("--rounds", type=int, default=1,
                   help="passes over all candidates (rotated order, fresh processes); with 2 or "
                        "more the report says whether best and default are apart beyond noise")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per candidate")
    p.add_argument("--decode-max-tokens", type=int, default=8)
    p.add_argument("--verify-max-tokens", type=int, default=64)
    p.add_argument("--profile", help="sim profile for --backend sim (default: the space's)")
    p.add_argument("--allow-nvls", action="store_true",
                   help="with --candidates: let a candidate set NCCL_NVLS_ENABLE=1")
    p.add_argument("--workdir", help="keep worker logs here")
    cli.add_output(p, record="the report (every candidate's latencies, the ranking)", json_also="--out")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cli.interruptible()
    try:
        forbidden: Mapping[str, Any] | None = None
        profile = args.profile
        hidden = args.hidden
        if args.space:
            space = load_space(args.space)
            candidates = candidates_from_space(space)
            forbidden = dict(space.forbidden.env)
            if forbids_nvls(forbidden) and args.allow_nvls:
                raise ConfigError("--allow-nvls: the space forbids NCCL_NVLS_ENABLE=1",
                                  file=space.file, field="forbidden.env")
            profile = profile or space.profile
            hidden = hidden or hidden_of_space(space)
        else:
            candidates = load_candidates(args.candidates)
            if hidden is None:
                raise ConfigError("--hidden is required with --candidates")
        settings = ProbeSettings(
            tp=args.tp, hidden=hidden, tokens=args.tokens, iters=args.iters, warmup=args.warmup,
            batch=args.batch, rounds=args.rounds, backend=args.backend, timeout_s=args.timeout,
            decode_max_tokens=args.decode_max_tokens, verify_max_tokens=args.verify_max_tokens,
            profile=profile)

        def progress(row: dict[str, Any]) -> None:
            what = "ok" if row.get("status") == "ok" else f"FAILED: {row.get('reason')}"
            print(f"  {row['name']}: {what} ({row.get('wall_s', 0):.1f} s)", file=sys.stderr,
                  flush=True)

        report = run_probe(candidates, settings, forbidden_env=forbidden,
                           allow_nvls=args.allow_nvls, workdir=args.workdir, on_row=progress)
    except (AutotuneError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    except KeyboardInterrupt:  # the workers are stopped by now
        print("interrupted: every worker stopped; no report", file=sys.stderr)
        return cli.interrupted_code()
    return cli.emit(args, text=format_table(report), record=report,
                    code=cli.OK if report["ranking"] else cli.NO_RESULT)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
