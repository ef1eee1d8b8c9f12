"""How much of a real SGLang server's prefill CUDA-graph capture goes to the token sizes above a cap.

Usage (on trial server logs brought back from the GPU host and unpacked):
    python3 scripts/gpu/prefill_capture.py --cap 1536 LOG [LOG ...] [--json OUT]
or, for the cap a space's trials get: ``--space SPACE [--tokenizer MODEL_DIR]``.

SGLang 0.5.17 logs each prefill capture (the target's, and with EAGLE the draft's) as
"Capture <who> prefill CUDA graph begin. ... num_tokens=[...]", a tqdm bar that captures the sizes
from the largest down ("N/TOTAL [MM:SS<..."), and "Capture <who> prefill CUDA graph end. elapsed=X s".
For each capture this prints its elapsed seconds and the bar's time when the sizes above ``--cap``
were done: what the lean start's ``--cuda-graph-max-bs-prefill CAP`` leaves out
(``autotune/sglang/trial_start.py``). The bar counts whole seconds, and the first size captured
carries one-time set-up that a capped capture pays on its own first size, so the figure is an
estimate of the cut, good to about a second, not a measurement of a capped start.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

BLOCK = re.compile(r"Capture (\w+) prefill CUDA graph begin.*?num_tokens=\[([0-9, ]+)\](.*?)"
                   r"Capture \1 prefill CUDA graph end\. elapsed=([0-9.]+) s", re.S)
MARK = re.compile(r"\(num_tokens=\d+ [^)]*\):\s+\d+%\|[^|]*\|\s+(\d+)/\d+ \[(\d+):(\d+)")


def captures(text: str, *, cap: int) -> list[dict]:
    """Every prefill capture in a log's text: who, sizes, elapsed, and the sizes above ``cap``
    with the bar's seconds when they were done (None when the bar never showed that count)."""
    out = []
    for m in BLOCK.finditer(text):
        sizes = [int(x) for x in m.group(2).split(",")]
        above = sum(1 for s in sizes if s > cap)
        marks = [(int(n), int(mm) * 60 + int(ss)) for n, mm, ss in MARK.findall(m.group(3))]
        done = min((t for n, t in marks if n >= above), default=None) if above else 0
        out.append({"who": m.group(1), "sizes": len(sizes), "above": above, "elapsed_s": float(m.group(4)),
                    "above_done_s": done})
    return out


def space_cap(space_path: Path, tokenizer: Path | None, gpu_mib: float | None) -> int:
    """Print the cap the lean start gives ``space_path``'s trials: the prefill bound of its workload
    (counted with ``tokenizer``'s tokenizer.json where given, else by bytes) and the sizes kept;
    ``gpu_mib`` None: the GPU here, as SGLang reads it. Needs the repository on ``sys.path``."""
    from autotune.sglang.graph_sizes import (
        default_prefill_max_tokens,
        gpu_memory_mib,
        model_uses_mla,
        prefill_graph_token_sizes,
    )
    from autotune.sglang.trial_start import covering_prefill_max_tokens
    from autotune.space.search_space import load_space
    from autotune.space.workload import Workload
    from autotune.trial.prefill_bound import prefill_token_bound, token_counter

    gpu_mib = gpu_memory_mib() if gpu_mib is None else gpu_mib
    space = load_space(space_path)
    workload = Workload.from_spec(space.workload)
    mla = model_uses_mla(space.model_path)
    ceiling = default_prefill_max_tokens(gpu_mib, mla=mla, model_path=space.model_path)
    count = token_counter(str(tokenizer)) if tokenizer is not None else None
    if tokenizer is not None and count is None:
        print(f"{tokenizer}: no tokenizer.json, or no `tokenizers` library here", file=sys.stderr)
        return 1
    bound = prefill_token_bound(workload, count=count)
    cap = covering_prefill_max_tokens(bound, ceiling=ceiling) if bound is not None else None
    kept = len(prefill_graph_token_sizes(cap)) if cap is not None else None
    default = len(prefill_graph_token_sizes(8192))
    what = (f"cap {cap}, {kept} of the {default} sizes an H200 captures by default" if cap is not None else
            f"no cap (above the default of {ceiling} tokens, or unknown): all {default} sizes")
    gpu = f"{gpu_mib:.0f} MiB GPU" if gpu_mib is not None else "GPU unknown"
    model = {None: "model config not found", True: "MLA model", False: "not MLA"}[mla]
    print(f"{space_path}: prefill bound {bound} tokens ({'tokenizer' if count else 'bytes'}), {gpu}, {model}, "
          f"default max {ceiling}: {what}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap", type=int, help="the capture cap (--cuda-graph-max-bs-prefill)")
    ap.add_argument("logs", nargs="*", type=Path)
    ap.add_argument("--json", type=Path, help="write every capture as JSON here")
    ap.add_argument("--space", type=Path, help="instead: print the cap the lean start gives this space's trials")
    ap.add_argument("--tokenizer", type=Path, help="with --space: a folder with the model's tokenizer.json")
    ap.add_argument("--gpu-mib", type=float, help="with --space: the GPU's memory.total (an H200: 143771); "
                    "default: nvidia-smi's here, as SGLang reads it")
    a = ap.parse_args(argv)
    if a.space is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        return space_cap(a.space, a.tokenizer, a.gpu_mib)
    if a.cap is None or not a.logs:
        ap.error("--cap and at least one LOG are needed (or --space)")
    rows = []
    for log in a.logs:
        for c in captures(log.read_text(errors="replace"), cap=a.cap):
            rows.append({"log": log.name, **c})
            print(f"{log.name[:48]:48s} {c['who']:7s} sizes {c['sizes']:3d}, {c['above']:2d} above {a.cap}: "
                  f"capture {c['elapsed_s']:6.2f} s, those done after {c['above_done_s']} s")
    if not rows:
        print("no prefill capture found in these logs", file=sys.stderr)
        return 1
    for who in sorted({r["who"] for r in rows}):
        mine = [r for r in rows if r["who"] == who and r["above_done_s"] is not None]
        if mine:
            print(f"{who}: {len(mine)} captures, median {statistics.median(r['elapsed_s'] for r in mine):.2f} s, "
                  f"of which the sizes above {a.cap} median {statistics.median(r['above_done_s'] for r in mine)} s "
                  f"(range {min(r['above_done_s'] for r in mine)}-{max(r['above_done_s'] for r in mine)} s)")
    if a.json:
        a.json.write_text(json.dumps({"cap": a.cap, "captures": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
