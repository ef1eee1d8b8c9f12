"""The Kimi-K2.5 comparison from an eight-GPU plan's records (scripts/gpu/plan_x8.sh): per config, the
measured cycle against the seed case study and against the emulator's Kimi profile rescaled to the
served layer count; then the search's verdict against the sweep's.

    python3 scripts/gpu/kimi_compare.py RESULTS [--layers N] [--json OUT]
    python3 scripts/gpu/kimi_compare.py --write-profile PATH --layers N   # the rescaled profile

RESULTS is a call's ``results.tar.gz`` unpacked. The layer count is read from the target config the
plan brought back (``RESULTS/models/kimi-k2.5/target/config.json``) unless ``--layers`` gives it.

Per config: forced accept length; tok/s and speedup; draft / verify / re-extend / other ms per cycle
(SGLang's device timer); verify's share of that cycle (draft + verify + re-extend + other, the cycle
the seed's profiler and the emulator count; the tool's own ``cycle_ms`` also spreads the prefill
over the cycles); break-even accept length (the tool's: cycle over the plain step, both with their
prefill share); the verdict (faster than plain or not). The same for the emulator, and the seed's
figures beside the config it measured (EAGLE3 5-1-6: 6 tokens verified, accept length about 2.1).

The rescaled profile (:func:`rescaled`) is ``kimi-k2.5-eagle3-tp8`` (61 layers, calibrated to the
seed's PCIe Blackwell box, INT4 weights) with every per-layer cost scaled by ``layers / 61``: the
target's weight-bound time (``dense_ms``), its per-token compute (``per_token_ms``), the expert
streaming (``expert_ms``), the prefill per token and the weights; the all-reduce count follows the
layer count by itself. The draft, the re-extend, the per-forward overheads and the CPU time do not
scale. It stays the seed's hardware: set beside the H200 it says how far the seed's machine and this
one part, not what the H200 should do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import multi_records as mr  # noqa: E402

SPACE = HERE / "h200x8-kimi-k2.5-tp8.yaml"
PROFILE = "kimi-k2.5-eagle3-tp8"
#: The seed case study (shared/seed/eagle3-profiling-case-study.txt): Kimi-K2.5 + EAGLE-3 at TP 8 on
#: 8 RTX PRO 6000 Blackwell, 5 steps (6 tokens verified), its profiler's ms per cycle; plain decoding
#: 90 tok/s (11.1 ms a token), speculation 71 tok/s; "accept_len > 31.74/11.1 = 2.86".
SEED = {"config": "5-1-6", "draft_ms": 2.18, "verify_ms": 28.45, "extend_ms": 1.12, "other_ms": 0.0,
        "verify_pct": 89.6, "accept_length": 2.1, "plain_tok_s": 90.0, "spec_tok_s": 71.0, "break_even": 2.86}
SCALED = ("dense_ms", "per_token_ms", "expert_ms", "prefill_ms_per_token", "weights_gib")


def rescaled(layers: int) -> Any:
    """The emulator's Kimi profile with its per-layer costs scaled to ``layers`` (see the docstring)."""
    from autotune.sim.profile import load_profile

    base = load_profile(PROFILE)
    factor = layers / base.num_layers
    changes = {k: getattr(base, k) * factor for k in SCALED}
    return mr.replace_profile(base, name=f"{PROFILE}-{layers}-layers", num_layers=layers, **changes)


def layers_of(results: Path) -> int | None:
    try:
        config = results / "models" / "kimi-k2.5" / "target" / "config.json"
        return json.loads(config.read_text())["num_hidden_layers"]
    except (OSError, ValueError, KeyError):
        return None


def row_of(record: dict[str, Any], plain: dict[str, Any] | None) -> dict[str, Any]:
    """A measured record's figures; ``plain`` is the sweep's plain record, whose decode step
    (without its prefill share) is the break-even's denominator, as the emulator's is."""
    ph = record.get("phases") or {}
    speedup = record.get("speedup")
    step = mr.decode_cycle_ms(plain) if plain else None
    cycle = mr.decode_cycle_ms(record)
    return {"tok_s": record.get("output_tok_s"), "speedup": speedup, "decode_ms": ph.get("decode_ms"),
            "break_even_decode": cycle / step if cycle and step and not record.get("is_baseline") else None,
            "accept_length": record.get("accept_length"), "forced": record.get("synthetic_accept_length"),
            "draft_ms": ph.get("draft_ms"), "verify_ms": ph.get("verify_ms"), "extend_ms": ph.get("extend_ms"),
            "other_ms": ph.get("other_ms"), "verify_pct": mr.verify_share(record),
            "break_even": record.get("break_even_accept_length"), "range_pct": record.get("output_tok_s_range_pct"),
            "faster": None if speedup is None or record.get("is_baseline") else speedup > 1.0}


def emulator_row(exp: dict[str, Any]) -> dict[str, Any]:
    ph = exp.get("phases") or {}
    cycle = ph.get("cycle_ms")
    speedup = exp.get("speedup")
    return {"tok_s": exp.get("output_tok_s"), "speedup": speedup, "accept_length": exp.get("accept_length"),
            "decode_ms": ph.get("decode_ms"), "break_even_decode": exp.get("break_even_accept_length"),
            "draft_ms": ph.get("draft_ms"), "verify_ms": ph.get("verify_ms"), "extend_ms": ph.get("extend_ms"),
            "other_ms": ph.get("other_ms"),
            "verify_pct": 100 * ph["verify_ms"] / cycle if cycle and ph.get("verify_ms") is not None else None,
            "break_even": None, "faster": None if speedup is None or exp.get("is_baseline") else speedup > 1.0}


def best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in rows if r["measured"]["tok_s"] is not None]
    return max(ok, key=lambda r: r["measured"]["tok_s"]) if ok else None


def report(results: Path, *, layers: int, space_path: Path = SPACE) -> dict[str, Any]:
    from autotune.space.search_space import load_space

    space = load_space(space_path)
    ev = mr.evaluator(space, rescaled(layers))
    folder = mr.space_dir(results, space.name)
    recs = mr.records(folder)
    rows: list[dict[str, Any]] = []
    plain = next((r for r in recs["sweep"] if r.get("is_baseline") and r.get("status") != "failed"), None)
    for r in recs["sweep"]:
        params = r.get("params") or {}
        rows.append({"config": mr.label(params), "params": params, "measured": row_of(r, plain),
                     "emulator": emulator_row(ev.expected(params)), "status": r.get("status")})
    search = [r for r in recs["search"] if r.get("status") != "failed" and r.get("params")]
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    winner = summary.get("winner_params")
    if winner is not None and summary.get("winner_is_baseline"):
        winner = {**winner, "speculative_algorithm": None}
    sweep_best = best(rows)
    spec_rows = [r for r in rows if r["config"] != "plain" and r["measured"]["speedup"] is not None]
    pays = any(r["measured"]["faster"] for r in spec_rows)
    sweep_verdict = (sweep_best["config"] if pays and sweep_best else "plain") if spec_rows else None
    search_verdict = None if winner is None else mr.label(winner)
    both = sweep_verdict is not None and search_verdict is not None
    return {"space": space.name, "layers": layers, "profile": f"{PROFILE} x {layers}/61 layers", "rows": rows,
            "seed": SEED, "sweep_verdict": sweep_verdict, "search_trials": len(search),
            "search_winner": search_verdict, "search_winner_tok_s": summary.get("output_tok_s"),
            # Does the search say what the sweep says: that speculation pays (or not), and, where its
            # winner is one of the swept configs, the same config? A tree winner lies outside the sweep.
            "agree_speculation_pays": (search_verdict != "plain") == pays if both else None,
            "agree_config": (search_verdict == sweep_verdict
                             if both and search_verdict in [r["config"] for r in rows] else None)}


def _ms(x: dict[str, Any]) -> str:
    f = mr.fmt
    if x.get("decode_ms"):  # plain decoding: one forward a step
        return f"decode {f(x['decode_ms'], '.2f')} + other {f(x['other_ms'], '.2f')}"
    return " / ".join(f(x[k], ".2f") for k in ("draft_ms", "verify_ms", "extend_ms", "other_ms"))


def render(rep: dict[str, Any]) -> str:
    f = mr.fmt
    head = ["config", "source", "accept", "tok/s", "speedup", "draft / verify / re-extend / other ms",
            "verify % of cycle", "break-even (cycle / plain step)", "break-even (tool)", "faster than plain"]
    body = []
    for r in rep["rows"]:
        for source in ("measured", "emulator"):
            x = r[source]
            body.append([r["config"], "measured" if source == "measured" else f"emulator, {rep['layers']} layers",
                         f(x["accept_length"], ".2f"), f(x["tok_s"]), f(x["speedup"], ".3f"), _ms(x),
                         f(x["verify_pct"]), f(x["break_even_decode"], ".2f"), f(x["break_even"], ".2f"),
                         f(x["faster"])])
        if r["config"] == rep["seed"]["config"]:
            s = rep["seed"]
            body.append([r["config"], "seed (61 layers, PCIe Blackwell)", f(s["accept_length"]),
                         f(s["spec_tok_s"], ".0f"), f(s["spec_tok_s"] / s["plain_tok_s"], ".3f"), _ms(s),
                         f(s["verify_pct"]), f(s["break_even"], ".2f"), "-", "no"])
    lines = [f"{rep['space']}: {rep['layers']} target layers; emulator profile {rep['profile']}", mr.table(head, body)]
    lines.append(f"sweep's verdict: {rep['sweep_verdict'] or '-'}; the search ({rep['search_trials']} records) "
                 f"chose {rep['search_winner'] or '-'} ({f(rep['search_winner_tok_s'])} tok/s confirmed); "
                 f"agrees that speculation "
                 f"{'pays' if rep['sweep_verdict'] not in (None, 'plain') else 'does not pay'}: "
                 f"{f(rep['agree_speculation_pays'])}; same config: "
                 f"{f(rep['agree_config']) if rep['agree_config'] is not None else 'n/a (winner outside the sweep)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path)
    parser.add_argument("--layers", type=int, help="target layers (default: the brought-back config's)")
    parser.add_argument("--space", type=Path, default=SPACE)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--write-profile", type=Path, help="write the rescaled profile (needs --layers) and exit")
    args = parser.parse_args(argv)
    if args.write_profile:
        if not args.layers:
            parser.error("--write-profile needs --layers")
        mr.write_profile(rescaled(args.layers), args.write_profile)
        return 0
    if args.results is None:
        parser.error("RESULTS is required")
    layers = args.layers or layers_of(args.results)
    if not layers:
        parser.error(f"no layer count: {args.results}/models/kimi-k2.5/target/config.json is missing; give --layers")
    rep = report(args.results, layers=layers, space_path=args.space)
    print(render(rep))
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1, default=str))
    return 0 if rep["rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
