"""``autotune probe`` (``python -m autotune.nccl_probe``): rank NCCL settings by all-reduce latency at a model's sizes.

The command: its arguments, a space's candidates (``--space``) or a file's, and the report. What
is measured and how candidates are ranked is :mod:`autotune.nccl.probe`'s; see
``docs/nccl-probe.md``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune import command_line as cli
from autotune.errors import AutotuneError, ConfigError
from autotune.nccl.candidates import forbids_nvls, load_candidates
from autotune.nccl.probe import BACKENDS, ProbeSettings, format_table, run_probe
from autotune.space.nccl_candidates import candidates_from_space, hidden_of_space
from autotune.space.packaged import SPACE_HELP
from autotune.space.search_space import load_space

#: The command's name when it is run as a module (``autotune probe`` passes its own).
PROG = "python -m autotune.nccl_probe"


@dataclass(frozen=True, kw_only=True)
class ProbeArgs:
    """``autotune probe``'s command line.

    Attributes:
        candidates: A candidates file (or ``space``).
        space: A space whose NCCL parameters are the candidates (or ``candidates``).
        tp: Ranks (GPUs) of the all-reduce.
        hidden: The hidden size (None: the space's).
        tokens: Token counts to time.
        backend: ``nccl``, ``sim`` or ``auto``.
        iters: Timed all-reduces per size.
        warmup: Untimed all-reduces per size first.
        batch: Back-to-back all-reduces per timed sample.
        rounds: Passes over all candidates.
        timeout: Seconds per candidate.
        decode_max_tokens: The largest token count timed as a decode step.
        verify_max_tokens: The largest token count timed as a verify step.
        profile: The sim profile (None: the space's).
        allow_nvls: Let a candidate of a file set ``NCCL_NVLS_ENABLE=1``.
        workdir: Where worker logs are kept.
        json: Print the report as JSON.
        output: Write the result to this file instead of stdout.
        json_also: The earlier ``--out FILE``.
    """

    candidates: str | None = None
    space: str | None = None
    tp: int
    hidden: int | None = None
    tokens: tuple[int, ...] = (1, 4, 8, 64)
    backend: str = "auto"
    iters: int = 200
    warmup: int = 20
    batch: int = 10
    rounds: int = 1
    timeout: float = 60.0
    decode_max_tokens: int = 8
    verify_max_tokens: int = 64
    profile: str | None = None
    allow_nvls: bool = False
    workdir: str | None = None
    json: bool = False
    output: str | None = None
    json_also: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune probe``, named ``prog`` in its usage lines."""
    p = cli.command_parser(prog, __doc__ or "", examples=[
        "{prog} --space demo --tp 8 --backend sim",
        "{prog} --candidates candidates.yaml --tp 2 --hidden 7168 --backend nccl --json -o nccl-probe.json"])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--candidates", help="candidates file (YAML or JSON; docs/nccl-probe.md)")
    src.add_argument("--space", help=SPACE_HELP + "; probe its NCCL_* parameter combinations")
    p.add_argument("--tp", type=cli.positive_int, required=True, help="ranks (GPUs) of the all-reduce")
    p.add_argument("--hidden", type=cli.positive_int, help="hidden size (default with --space: "
                   "nccl_prescreen.hidden, the sim profile's, or the model's config.json)")
    p.add_argument("--tokens", type=cli.int_list(cli.positive_int), default=(1, 4, 8, 64),
                   help="token counts, comma-separated (default 1,4,8,64)")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--iters", type=cli.positive_int, default=200, help="timed all-reduces per size")
    p.add_argument("--warmup", type=cli.non_negative_int, default=20, help="untimed all-reduces per size first")
    p.add_argument("--batch", type=cli.positive_int, default=10,
                   help="back-to-back all-reduces per timed sample, ranks met first; 1 times each "
                        "call alone (default 10)")
    p.add_argument("--rounds", type=cli.positive_int, default=1,
                   help="passes over all candidates (rotated order, fresh processes); with 2 or "
                        "more the report says whether best and default are apart beyond noise")
    p.add_argument("--timeout", type=cli.positive_float, default=60.0, help="seconds per candidate")
    p.add_argument("--decode-max-tokens", type=cli.positive_int, default=8)
    p.add_argument("--verify-max-tokens", type=cli.positive_int, default=64)
    p.add_argument("--profile", help="sim profile for --backend sim (default: the space's)")
    p.add_argument("--allow-nvls", action="store_true",
                   help="with --candidates: let a candidate set NCCL_NVLS_ENABLE=1")
    p.add_argument("--workdir", help="keep worker logs here")
    cli.add_output(p, record="the report (every candidate's latencies, the ranking)", json_also="--out")
    return p


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> ProbeArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`ProbeArgs`; exits 2 on a bad flag, as argparse does."""
    return ProbeArgs(**vars(build_parser(prog).parse_command(argv)))


def _progress(row: dict[str, Any]) -> None:
    what = "ok" if row.get("status") == "ok" else f"FAILED: {row.get('reason')}"
    print(f"  {row['name']}: {what} ({row.get('wall_s', 0):.1f} s)", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune probe (--space S | --candidates FILE) --tp N [...]``: the ranking, as the output
    convention says."""
    args = parse_args(argv, prog=prog)
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
            if args.candidates is None:  # argparse requires one of the two
                raise ConfigError("give --space or --candidates")
            candidates = load_candidates(args.candidates)
            if hidden is None:
                raise ConfigError("--hidden is required with --candidates")
        settings = ProbeSettings(
            tp=args.tp, hidden=hidden, tokens=args.tokens, iters=args.iters, warmup=args.warmup,
            batch=args.batch, rounds=args.rounds, backend=args.backend, timeout_s=args.timeout,
            decode_max_tokens=args.decode_max_tokens, verify_max_tokens=args.verify_max_tokens,
            profile=profile)
        report = run_probe(candidates, settings, forbidden_env=forbidden,
                           allow_nvls=args.allow_nvls, workdir=args.workdir, on_row=_progress)
    except (AutotuneError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    except KeyboardInterrupt:  # the workers are stopped by now
        print("interrupted: every worker stopped; no report", file=sys.stderr)
        return cli.stopped_code()
    return cli.emit(args, text=format_table(report), record=report,
                    code=cli.OK if report["ranking"] else cli.NO_RESULT)
