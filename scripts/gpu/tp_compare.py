"""The two-GPU tables from a two-GPU plan's records (scripts/gpu/plan_x2.sh): the NCCL pre-screen,
TP 1 against TP 2, and two trials at once against the same configs alone.

    python3 scripts/gpu/tp_compare.py RESULTS [--mlruns DIR] [--json OUT]
    python3 scripts/gpu/tp_compare.py --write-profile PATH   # the emulator profile it compares with

RESULTS is a call's ``results.tar.gz`` unpacked; ``mlruns.tar.gz`` unpacked into the same folder
is found there (else ``--mlruns``). Nothing here is a measured figure: every number is read from
the records, or is the emulator's expectation for the same config.

- **Pre-screen**: each NCCL candidate's decode-size latency per round and over the rounds, the
  ranking, whether the best beat the default in every round (``separated``), the kept list, and
  whether the default was kept by the rule (kept although not among the best ``keep``).
- **TP 1 against TP 2**: per group (TP, custom all-reduce, NCCL protocol) the plain and the 3-4-8
  tok/s, the repeat range and the speedup; then the TP 2 / TP 1 ratio of plain and of 3-4-8, next to
  what the emulator's TP term predicts for the same configs (profile ``h200-llama-8b-dummy``, fitted
  to the single-H200 8B sweep, given this machine's two GPUs). The TP 1 rows differ only in an NCCL
  setting TP 1 never uses: their spread is this machine's server-to-server noise.
- **Two at once**: per trial of the concurrent search, the GPUs Ray gave it, how long its server
  overlapped the other's, its tok/s beside the busy neighbour and alone on the same GPU, the ratio,
  and both readings' repeat ranges. "distorted" is a ratio further from 1 than both ranges
  together (the two readings' own spreads could not explain it).
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
from alone import overlap_s  # noqa: E402

TP_SPACE = HERE / "h200x2-llama-8b-tp.yaml"
CONC_SPACE = HERE / "h200x2-llama-8b-conc2.yaml"
EMULATOR_PROFILE = "h200-llama-8b-dummy"


def x2_profile() -> Any:
    """The fitted single-H200 8B profile on a machine of two GPUs (its TP term is the model's own)."""
    from autotune.sim.profile import load_profile

    return mr.replace_profile(load_profile(EMULATOR_PROFILE), name="h200x2-llama-8b-dummy", gpus_per_node=2)


def prescreen(mlruns: Path, name: str) -> dict[str, Any] | None:
    """The pre-screen's report and kept list, as read from the search's experiment folder."""
    report_path = mr.ray_file(mlruns, name, "nccl-probe.json")
    if report_path is None:
        return None
    import yaml

    report = json.loads(report_path.read_text())
    narrowed = mr.ray_file(mlruns, name, "space-nccl-prescreen.yaml")
    kept = (yaml.safe_load(narrowed.read_text()) or {}).get("nccl_prescreen", {}).get("kept") if narrowed else None
    keep = (report.get("args") or {}).get("keep")
    rows = [{"name": r["name"], "status": r["status"], "decode_us": r.get("decode_us"),
             "rounds_us": r.get("decode_us_rounds")} for r in report["rows"]]
    default = (report.get("default") or {}).get("name")
    spread = report.get("spread") or {}
    by_rank = report.get("ranking") or []
    n_kept = len(kept or [])
    return {"rows": rows, "ranking": by_rank, "separated": spread.get("separated"), "rounds": spread.get("rounds"),
            "kept": kept, "keep": keep, "default": default, "host": report.get("host"),
            "default_kept_by_rule": bool(kept and default in kept and default not in by_rank[:n_kept])}


def group_of(params: dict[str, Any]) -> tuple:
    return (params.get("tp_size"), params.get("disable_custom_all_reduce"), params.get("NCCL_PROTO"))


def tp_rows(recs: dict[str, list[dict]], evaluate: Any) -> list[dict[str, Any]]:
    """One row per group: plain and speculative readings (search and sweep alike), emulator's too."""
    groups: dict[tuple, dict[str, Any]] = {}
    for source in ("search", "sweep"):
        for r in recs[source]:
            params = {k: v for k, v in (r.get("params") or {}).items() if k != "nccl_candidate"}
            g = groups.setdefault(group_of(params), {"params": params, "plain": [], "spec": []})
            if r.get("is_baseline"):
                g["plain"].append(r)
            elif r.get("status") != "failed":
                g["spec"].append(r)
                if r.get("baseline_tok_s") is not None:
                    g.setdefault("plain_from_spec", []).append(r["baseline_tok_s"])
    out = []
    for key, g in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        spec = g["spec"][0] if g["spec"] else None
        plain = g["plain"][0]["output_tok_s"] if g["plain"] else (g.get("plain_from_spec") or [None])[0]
        exp = evaluate(g["params"]) if evaluate else {}
        out.append({"tp": key[0], "custom_ar": None if key[0] == 1 else not key[1], "nccl_proto": key[2],
                    "plain_tok_s": plain, "spec_tok_s": spec and spec.get("output_tok_s"),
                    "spec_range_pct": spec and spec.get("output_tok_s_range_pct"),
                    "speedup": spec and spec.get("speedup"), "readings": len(g["spec"]),
                    "emulator_spec_tok_s": exp.get("output_tok_s"), "emulator_plain_tok_s": exp.get("baseline_tok_s")})
    return out


def tp_ratio(rows: list[dict[str, Any]], key: str) -> float | None:
    """TP 2 / TP 1 of ``key``, each side the default-NCCL group with custom all-reduce on (TP 2)."""
    one = [r[key] for r in rows if r["tp"] == 1 and r["nccl_proto"] is None and r[key]]
    two = [r[key] for r in rows if r["tp"] == 2 and r["custom_ar"] and r["nccl_proto"] is None and r[key]]
    return two[0] / one[0] if one and two else None


def concurrency(folder: Path, fixed: dict[str, Any]) -> list[dict[str, Any]]:
    """Per concurrent trial: GPUs, overlap with the others, tok/s beside them and alone
    (``fixed``: the space's fixed args, for the configs' labels)."""
    try:
        lines = json.loads((folder / "concurrency.json").read_text())
    except (OSError, ValueError):
        return []
    alone = {}
    for r in mr.load_folder(folder / "alone", "a*.json"):
        meta = json.loads(Path(r["_file"]).with_name(Path(r["_file"]).stem + ".params.json").read_text())
        alone[json.dumps(meta["params"], sort_keys=True)] = (r, meta.get("gpus"))
    search = {json.dumps(r.get("params"), sort_keys=True): r for r in mr.load_folder(folder / "search", "s*.json")
              if not r.get("is_baseline")}
    out = []
    for t in lines:
        if t["is_baseline"]:
            continue
        key = json.dumps(t["params"], sort_keys=True)
        rec, (solo, solo_gpus) = search.get(key, {}), alone.get(key, ({}, None))
        others = [overlap_s(t, u) for u in lines if u is not t and not u["is_baseline"]]
        conc, lone = t.get("output_tok_s"), solo.get("output_tok_s")
        ratio = conc / lone if conc and lone else None
        noise = (rec.get("output_tok_s_range_pct") or 0) + (solo.get("output_tok_s_range_pct") or 0)
        out.append({"config": mr.label({**fixed, **t["params"]}), "gpus": t["gpus"], "alone_gpus": solo_gpus,
                    "overlap_s": max((o for o in others if o is not None), default=None),
                    "tok_s_together": conc, "tok_s_alone": lone, "ratio": ratio,
                    "range_together_pct": rec.get("output_tok_s_range_pct"),
                    "range_alone_pct": solo.get("output_tok_s_range_pct"),
                    "distorted": None if ratio is None else abs(ratio - 1) * 100 > noise})
    return out


def report(results: Path, mlruns: Path, *, tp_space: Path, conc_space: Path) -> dict[str, Any]:
    from autotune.space.search_space import load_space

    space = load_space(tp_space)
    ev = mr.evaluator(space, x2_profile())
    out: dict[str, Any] = {"tp_space": space.name}
    out["prescreen"] = prescreen(mlruns, space.name)
    try:
        recs = mr.records(mr.space_dir(results, space.name))
        out["tp"] = tp_rows(recs, ev.expected)
    except FileNotFoundError:
        out["tp"] = []
    for key in ("plain_tok_s", "spec_tok_s"):
        out[f"tp2_over_tp1_{key}"] = tp_ratio(out["tp"], key)
        out[f"emulator_tp2_over_tp1_{key}"] = tp_ratio(out["tp"], "emulator_" + key)
    try:
        conc = load_space(conc_space)
        out["concurrency"] = concurrency(mr.space_dir(results, conc.name), dict(conc.fixed_args))
    except FileNotFoundError:
        out["concurrency"] = []
    gpus = [c["gpus"] for c in out["concurrency"]]
    out["distinct_gpus"] = len(set(gpus)) == len(gpus) and None not in gpus if gpus else None
    return out


def render(rep: dict[str, Any]) -> str:
    f = mr.fmt
    parts = []
    pre = rep["prescreen"]
    if pre:
        parts.append(f"NCCL pre-screen ({pre['rounds']} round(s); kept {pre['kept']}; best beat the default in "
                     f"every round: {f(pre['separated'])}; default kept by the rule: {f(pre['default_kept_by_rule'])})")
        parts.append(mr.table(["candidate", "decode us per round", "decode us (median)", "rank"], [
            [r["name"], " / ".join(f(x) for x in (r["rounds_us"] or [])) or "-", f(r["decode_us"]),
             (pre["ranking"].index(r["name"]) + 1) if r["name"] in pre["ranking"] else r["status"]]
            for r in pre["rows"]]))
    else:
        parts.append("NCCL pre-screen: no report found (mlruns/ray/<space>/run-*/nccl-probe.json)")
    parts.append("\nTP 1 against TP 2 (3-4-8 and plain, same workload)")
    parts.append(mr.table(
        ["TP", "custom all-reduce", "NCCL_PROTO", "plain tok/s", "3-4-8 tok/s", "range %", "speedup", "readings",
         "emulator plain", "emulator 3-4-8"],
        [[r["tp"], f(r["custom_ar"]), r["nccl_proto"] or "default", f(r["plain_tok_s"]), f(r["spec_tok_s"]),
          f(r["spec_range_pct"], ".2f"), f(r["speedup"], ".3f"), r["readings"], f(r["emulator_plain_tok_s"]),
          f(r["emulator_spec_tok_s"])] for r in rep["tp"]]))
    parts.append(f"TP2/TP1, default NCCL, custom all-reduce on: plain {f(rep['tp2_over_tp1_plain_tok_s'], '.3f')} "
                 f"(emulator {f(rep['emulator_tp2_over_tp1_plain_tok_s'], '.3f')}), 3-4-8 "
                 f"{f(rep['tp2_over_tp1_spec_tok_s'], '.3f')} "
                 f"(emulator {f(rep['emulator_tp2_over_tp1_spec_tok_s'], '.3f')})")
    parts.append("\nTwo trials at once, one GPU each, against the same configs alone on the same GPU")
    parts.append(mr.table(
        ["config", "GPU (Ray)", "GPU (alone)", "overlap s", "tok/s together", "tok/s alone", "ratio",
         "range % together / alone", "distorted"],
        [[c["config"], c["gpus"], c["alone_gpus"], f(c["overlap_s"], ".0f"), f(c["tok_s_together"]),
          f(c["tok_s_alone"]), f(c["ratio"], ".3f"),
          f"{f(c['range_together_pct'], '.2f')} / {f(c['range_alone_pct'], '.2f')}", f(c["distorted"])]
         for c in rep["concurrency"]]))
    parts.append(f"each trial its own GPU: {f(rep['distinct_gpus'])}")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path)
    parser.add_argument("--mlruns", type=Path, help="default: RESULTS/mlruns")
    parser.add_argument("--tp-space", type=Path, default=TP_SPACE)
    parser.add_argument("--conc-space", type=Path, default=CONC_SPACE)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--write-profile", type=Path, help="write the emulator profile compared with, and exit")
    args = parser.parse_args(argv)
    if args.write_profile:
        mr.write_profile(x2_profile(), args.write_profile)
        return 0
    if args.results is None:
        parser.error("RESULTS is required")
    rep = report(args.results, args.mlruns or args.results / "mlruns", tp_space=args.tp_space,
                 conc_space=args.conc_space)
    print(render(rep))
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1, default=str))
    return 0 if rep["tp"] or rep["concurrency"] else 1


if __name__ == "__main__":
    sys.exit(main())
