"""``python -m autotune.simtools.fit``: fit an emulator profile to trial summaries, predict the rest.

``python -m autotune.simtools.fit --measurements DIR_OR_FILES... --base-profile NAME_OR_PATH
--name NAME (--fit-half even|odd | --fit ID,ID...) --out-profile PATH --report PATH...``

Reads ``summary_json`` files (one per measured config, the plain baseline among them), fits the
timing keys of a dense single-GPU profile to the fit half, writes the profile, then predicts the
other half with the emulator's own model and reports the error on tok/s and on the phase shares
against the goals (10% and 5 points). ``--list`` only prints the config ids and the excluded
files. The fit is :func:`autotune.simtools.fit.command.fit_profile`'s; documented in
``docs/sim-profiles.md``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from autotune import command_line as cli
from autotune.errors import AutotuneError, ConfigError
from autotune.simtools.fit.command import fit_profile, write_profile, write_report
from autotune.simtools.fit.data import load_measurements

#: The command's name when it is run as a module.
PROG = "python -m autotune.simtools.fit"


@dataclass(frozen=True, kw_only=True)
class FitArgs:
    """``python -m autotune.simtools.fit``'s command line.

    Attributes:
        measurements: Trial summary JSON files, or folders of them.
        base_profile: The profile whose other keys the fit keeps.
        name: The fitted profile's name.
        fit_half: ``even`` or ``odd``: the deterministic split.
        fit: Comma-separated config ids to fit.
        list_only: Print the config ids and exclusions only (``--list``).
        out_profile: Where to write the fitted profile.
        report: Report paths (``.json``, ``.md``, or both).
        set_keys: ``KEY=VALUE`` profile keys to set (``--set``).
        input_len: Prompt tokens a request is assumed to have.
    """

    measurements: list[str]
    base_profile: str = "llama-3.1-8b-eagle3-h100"
    name: str = "h200-tiny-llama-dummy"
    fit_half: str | None = None
    fit: str | None = None
    list_only: bool = False
    out_profile: str | None = None
    report: list[str]
    set_keys: list[str]
    input_len: int = 64


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``python -m autotune.simtools.fit``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(prog, __doc__ or "", examples=[
        "{prog} --measurements runs/ --list",
        "{prog} --measurements runs/ --fit-half even --out-profile fitted.yaml --report fit-report"])
    parser.add_argument("--measurements", nargs="+", required=True,
                        help="trial summary JSON files, or directories of them")
    parser.add_argument("--base-profile", default="llama-3.1-8b-eagle3-h100",
                        help="profile whose other keys the fit keeps (default: %(default)s)")
    parser.add_argument("--name", default="h200-tiny-llama-dummy", help="fitted profile name")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--fit-half", choices=("even", "odd"), help="deterministic split")
    which.add_argument("--fit", help="comma-separated config ids to fit (see --list)")
    which.add_argument("--list", dest="list_only", action="store_true", help="print config ids and exclusions only")
    parser.add_argument("--out-profile", help="where to write the fitted profile YAML")
    parser.add_argument("--report", nargs="+", default=[], help="report path(s): .json, .md, or both")
    parser.add_argument("--set", dest="set_keys", nargs="*", default=[], metavar="KEY=VALUE",
                        help="profile keys to set (num_layers=8 hidden_size=2048 ...)")
    parser.add_argument("--input-len", type=cli.positive_int, default=64,
                        help="prompt tokens a request is assumed to have (default: %(default)s)")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> FitArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`FitArgs`; exits 2 on a bad flag, as argparse does."""
    return FitArgs(**vars(build_parser(prog).parse_command(argv)))


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE ...`` as profile keys, each value read as a YAML scalar.

    Raises:
        ConfigError: An item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"expected KEY=VALUE, got {item!r}", field="--set")
        k, v = item.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Fit, write the profile and the report, and print the predicted half's errors against the goals."""
    args = parse_args(argv, prog=prog)
    try:
        ds = load_measurements(args.measurements)
        if args.list_only:
            for o in ds.observations:
                print(f"{o.id:16s} {o.tok_s:8.1f} tok/s  {o.source}")
            for e in ds.excluded:
                print(f"excluded         {e.source}: {e.reason}")
            return cli.OK
        if not args.out_profile:
            raise ConfigError("--out-profile is required (where to write the fitted profile)")
        fit_ids = [s.strip() for s in args.fit.split(",") if s.strip()] if args.fit else None
        res = fit_profile(ds, base=args.base_profile, name=args.name,
                          half=args.fit_half or ("even" if fit_ids is None else None),
                          fit_ids=fit_ids, input_len=args.input_len,
                          overrides=parse_set(args.set_keys), profile_path=args.out_profile)
        out = write_profile(res, args.out_profile, reports=args.report)
        written = write_report(res.report, args.report)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    g = res.report["goals"]
    for r in res.report["predicted"]:
        errs = " ".join(f"{k} {v:+.1f}" for k, v in r["share_err_points"].items())
        print(f"{r['id']:16s} tok/s {r['tok_s']:8.1f} pred {r['tok_s_pred']:8.1f} "
              f"({r['tok_s_err_pct']:+.1f}%)  share err pts: {errs}")
    print(f"tok/s: max {g['tok_s']['max_abs_pct']:.1f}%, median {g['tok_s']['median_abs_pct']:.1f}% "
          f"(goal {g['tok_s']['goal_pct']:g}%): {'PASS' if g['tok_s']['pass'] else 'FAIL'}")
    print(f"shares: max {g['shares']['max_abs_points']:.1f} pts, median "
          f"{g['shares']['median_abs_points']:.1f} pts (goal {g['shares']['goal_points']:g}): "
          f"{'PASS' if g['shares']['pass'] else 'FAIL'}")
    print(f"profile: {out}" + (f"; report: {', '.join(map(str, written))}" if written else ""))
    return cli.OK
