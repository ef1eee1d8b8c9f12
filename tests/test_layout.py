"""The package's layout is its data flow: every import points one way, and no module is large.

``docs/architecture.md`` draws the order. A package may import the foundation modules and any
package before it, never one after it; imports inside functions count too, since a lazy import
is still a dependency. The emulator's tools sit later than its core: ``sim.evaluate`` replays
spaces (after ``space``), ``sim.fit`` reads trial records (after ``tracking``); the emulator core
imports only ``sglang``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"

#: The data flow, first to last. A name is a top-level module or package of ``autotune``; the two
#: emulator tools are their own entries so that the core's rule can be checked apart from theirs.
ORDER = ("errors", "names", "_yaml_lines", "cli", "sglang", "sim", "nccl", "space", "sim.evaluate", "launch",
         "server", "bench", "profile", "trial", "tracking", "sim.fit", "export", "search", "nccl_probe",
         "bench_search", "__main__", "data")
#: What the emulator core may import besides itself (the issue's rule: the core imports only sglang/).
SIM_CORE_MAY_IMPORT = {"errors", "names", "sglang"}
MAX_LINES = 400


def _node(parts: tuple[str, ...]) -> str:
    """The ORDER entry a module (its dotted parts under autotune) belongs to."""
    head = parts[0].removesuffix(".py")
    if head == "sim" and len(parts) > 1 and parts[1].removesuffix(".py") in ("evaluate", "fit"):
        return "sim." + parts[1].removesuffix(".py")
    return head


def _imports() -> dict[tuple[str, str], list[str]]:
    """(importer node, imported node) -> where, for every import of autotune inside autotune."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).parts
        if rel == ("__init__.py",):
            continue
        src = _node(rel)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "autotune":
                    targets = [a.name for a in node.names]
                elif node.module.startswith("autotune."):
                    targets = [node.module.removeprefix("autotune.")]
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix("autotune.") for a in node.names if a.name.startswith("autotune.")]
            for target in targets:
                dst = _node(tuple(target.split(".")))
                if dst != src and dst != "__version__":
                    edges[(src, dst)].append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return edges


def test_every_import_points_down_the_data_flow() -> None:
    edges = _imports()
    unknown = sorted({n for edge in edges for n in edge} - set(ORDER))
    assert not unknown, f"modules the layout does not place (add them to ORDER and the docs): {unknown}"
    upward = [f"{src} -> {dst} ({', '.join(where[:3])})" for (src, dst), where in sorted(edges.items())
              if ORDER.index(dst) > ORDER.index(src)]
    assert not upward, "imports against the data flow:\n" + "\n".join(upward)


def test_the_emulator_core_imports_only_sglang() -> None:
    bad = [f"sim -> {dst} ({', '.join(where[:3])})" for (src, dst), where in sorted(_imports().items())
           if src == "sim" and dst not in SIM_CORE_MAY_IMPORT]
    assert not bad, "\n".join(bad)


def test_no_module_is_over_the_size_limit() -> None:
    big = {str(p.relative_to(PACKAGE.parent)): n for p in sorted(PACKAGE.rglob("*.py"))
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them along what they do): {big}"


#: The one autotune module that may import the repository's ``benchmarks`` (the research code the
#: package does not ship): ``python -m autotune.bench_search``, the thin entry to the sampler benchmark.
MAY_IMPORT_BENCHMARKS = {"autotune/bench_search.py"}


def test_only_the_thin_entry_imports_the_benchmarks() -> None:
    importers = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n == "benchmarks" or n.startswith("benchmarks.") for n in names):
                importers.add(str(path.relative_to(PACKAGE.parent)))
    assert importers == MAY_IMPORT_BENCHMARKS, (
        f"only {sorted(MAY_IMPORT_BENCHMARKS)} may import benchmarks (a wheel does not carry it); "
        f"found {sorted(importers)}")
