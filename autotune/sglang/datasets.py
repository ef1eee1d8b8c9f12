"""``workload.source: sglang:<dataset>[:<category>]``: prompts from SGLang's own dataset loaders.

Acceptance length depends on the data, so a search should be able to send what
``sglang.bench_serving`` sends. This delegates to ``sglang.benchmark.datasets`` (SGLang 0.5.2x) for
the datasets whose inputs are a local file:

* ``speed-bench`` (NVIDIA's SPEED-Bench throughput JSONL; category ``low_entropy``, ``mixed`` or
  ``high_entropy``, or all of them without one): each row's first turn, put through the model's
  chat template by SGLang's loader;
* ``sharegpt`` (a ShareGPT JSON file) and ``custom`` (SGLang's custom JSONL): the first human turn
  and the reply's length, as SGLang samples them.

The loader tokenizes with the model's tokenizer (``workload.tokenizer``, by default the space's
``model_path``), so prompt lengths are the model's own. A file is always required: the loaders'
own downloads (ShareGPT from the Hugging Face hub) would make a trial depend on the network.
Where SGLang or ``transformers`` is not importable, the error says so and names the alternative
(``source: jsonl`` with the prompts exported).
"""

from __future__ import annotations

import random
from argparse import Namespace
from dataclasses import dataclass

#: dataset -> its categories (empty: takes none).
DATASETS: dict[str, tuple[str, ...]] = {
    "speed-bench": ("low_entropy", "mixed", "high_entropy"),
    "sharegpt": (),
    "custom": (),
}
PREFIX = "sglang:"


class DatasetError(ValueError):
    """A ``sglang:`` source that cannot be loaded; the message says what would work."""


@dataclass(frozen=True)
class DatasetSource:
    """A parsed ``sglang:<dataset>[:<category>]``."""

    dataset: str
    category: str | None

    def __str__(self) -> str:
        return PREFIX + self.dataset + (f":{self.category}" if self.category else "")


def is_sglang_source(source: object) -> bool:
    return isinstance(source, str) and source.startswith(PREFIX)


def parse_source(source: str) -> DatasetSource:
    """``sglang:speed-bench:mixed`` -> ``DatasetSource("speed-bench", "mixed")``.

    Raises:
        DatasetError: An unknown dataset or category.
    """
    parts = source[len(PREFIX):].split(":")
    name, category = parts[0], (parts[1] if len(parts) > 1 else None)
    if name not in DATASETS or len(parts) > 2:
        raise DatasetError(f"{source!r}: the SGLang datasets autotune can load are "
                           f"{', '.join(PREFIX + d for d in DATASETS)} (speed-bench takes a category: "
                           f"sglang:speed-bench:{'|'.join(DATASETS['speed-bench'])})")
    if category is not None and category not in DATASETS[name]:
        takes = (f"one of {', '.join(DATASETS[name])}" if DATASETS[name] else "none")
        raise DatasetError(f"{source!r}: {name} takes {takes} as its category, got {category!r}")
    return DatasetSource(name, category)


def load_prompts(source: DatasetSource, *, path: str, tokenizer: str, count: int, seed: int,
                 output_len: int | None) -> list[tuple[str, int]]:
    """``count`` prompts from SGLang's loader, as (prompt text, output tokens) pairs.

    Args:
        source: The dataset and category.
        path: The dataset's local file.
        tokenizer: A tokenizer name or folder for ``transformers.AutoTokenizer``.
        count: How many prompts to ask the loader for.
        seed: Seeds Python's and NumPy's generators, which the loaders sample with.
        output_len: Output tokens of every request, or None for the data's own (ShareGPT's
            reply lengths; SPEED-Bench's fixed 512).

    Raises:
        DatasetError: SGLang or transformers not importable, the tokenizer not loadable, or the
            loader refusing the file.
    """
    try:
        from sglang.benchmark.datasets import DATASET_MAPPING
    except ImportError as exc:
        raise DatasetError(
            f"source {source} loads prompts with SGLang's dataset loaders "
            f"(sglang.benchmark.datasets), which are not importable here ({exc}); install "
            "sglang and transformers, or export the prompts to JSONL and use source: jsonl") from None
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
    except Exception as exc:  # noqa: BLE001 - any load failure is the same answer for the user
        raise DatasetError(f"source {source} needs the model's tokenizer; {tokenizer!r} could not "
                           f"be loaded ({type(exc).__name__}: {exc}); set workload.tokenizer to a "
                           "folder with tokenizer files") from None
    args = Namespace(dataset_name=source.dataset, dataset_path=path, num_prompts=count, seed=seed,
                     speed_bench_category=source.category,
                     speed_bench_output_len=output_len or 512, sharegpt_output_len=output_len,
                     sharegpt_context_len=None, prompt_suffix="", apply_chat_template=False,
                     tokenize_prompt=False)
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    try:
        rows = DATASET_MAPPING[source.dataset].from_args(args).load(tokenizer=tok)
    except Exception as exc:  # noqa: BLE001 - the loader's own message is the useful one
        raise DatasetError(f"source {source}: SGLang's loader refused {path}: "
                           f"{type(exc).__name__}: {exc}") from None
    return [(str(r.prompt), int(r.output_len)) for r in rows]


__all__ = ["DATASETS", "DatasetError", "DatasetSource", "PREFIX", "is_sglang_source", "load_prompts",
           "parse_source"]
