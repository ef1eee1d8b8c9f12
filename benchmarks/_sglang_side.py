"""SGLang's side of ``benchmarks.agreement``, run with an interpreter that has SGLang (the GPU kit's,
or ``.venv-sglang-data`` here): ``python benchmarks/_sglang_side.py rows|bench|tokenizer ...``.

- ``rows FILE N OUTPUT_LEN TOKENIZER SEED OUT.json``: the requests SGLang's own ShareGPT loader
  (``sglang.benchmark.datasets.sharegpt.sample_sharegpt_requests``) makes of ``FILE``, as JSON
  (prompt, prompt_len, output_len), seeded as ``bench_serving --seed`` seeds it.
- ``bench ARGS...``: ``python -m sglang.bench_serving ARGS...`` itself.
- ``serve``: the same, once per JSON list of ARGS read from stdin, in one process (SGLang's import,
  seconds to a minute, paid once); after each run a line ``@@DONE <exit code>`` on stdout.
- ``tokenizer DIR``: a word-level tokenizer in ``DIR`` for a server without one (the emulator).

On a machine without a GPU stack, ``sglang.benchmark.serving`` fails to import one module it
needs only for disaggregated serving (``sglang.srt.disaggregation.utils``, through torchvision);
that module alone is replaced by its one constant, and everything that loads prompts, sends
requests and computes ``output_throughput`` is SGLang's own code. The replacement is printed.
"""

from __future__ import annotations

import json
import random
import runpy
import sys
import types


def _importable() -> None:
    try:
        import sglang.srt.disaggregation.utils  # noqa: F401
    except ImportError as exc:
        stub = types.ModuleType("sglang.srt.disaggregation.utils")
        stub.FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # type: ignore[attr-defined]  # SGLang's value
        sys.modules["sglang.srt.disaggregation.utils"] = stub
        print(f"[sglang-side] sglang.srt.disaggregation.utils not importable here ({exc}); "
              "replaced by its FAKE_BOOTSTRAP_HOST constant", file=sys.stderr)


def rows(path: str, n: int, output_len: int, tokenizer: str, seed: int, out: str) -> None:
    _importable()
    from sglang.benchmark.datasets.sharegpt import sample_sharegpt_requests
    from transformers import AutoTokenizer

    random.seed(seed)
    tok = AutoTokenizer.from_pretrained(tokenizer)
    got = sample_sharegpt_requests(path, n, tok, fixed_output_len=output_len)
    with open(out, "w") as fh:
        json.dump([{"prompt": r.prompt, "prompt_len": r.prompt_len, "output_len": r.output_len}
                   for r in got], fh)


def tokenizer(folder: str) -> None:
    import os

    from tokenizers import Tokenizer, models, pre_tokenizers

    os.makedirs(folder, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 32000)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as fh:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "model_max_length": 1 << 20}, fh)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "rows":
        rows(args[0], int(args[1]), int(args[2]), args[3], int(args[4]), args[5])
    elif cmd == "bench":
        _importable()
        sys.argv = ["sglang.bench_serving", *args]
        runpy.run_module("sglang.bench_serving", run_name="__main__")
    elif cmd == "serve":
        _importable()
        from sglang.benchmark.serving import cli_main

        for line in sys.stdin:
            sys.argv = ["sglang.bench_serving", *json.loads(line)]
            code = 0
            try:
                cli_main()
            except SystemExit as exc:  # argparse, or bench_serving's own exit
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception as exc:  # noqa: BLE001  # one failed run is reported, the next still runs
                print(f"[sglang-side] bench_serving failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                code = 1
            print(f"\n@@DONE {code}", flush=True)
    elif cmd == "tokenizer":
        tokenizer(args[0])
    else:
        sys.exit(f"unknown command {cmd!r}: rows, bench or tokenizer")
