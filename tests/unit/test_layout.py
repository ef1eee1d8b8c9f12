"""The package's layout is its data flow: every import points one way, and no module is large.

``docs/architecture.md`` draws the order. A package may import the foundation modules and any
package before it, never one after it; imports inside functions count too, since a lazy import
is still a dependency. No two modules import each other, directly or through others (``if
TYPE_CHECKING:`` imports never run, so they are left out of that check only). The emulator
(``sim/``) imports only ``sglang/``; outside it, only the backend registry (``autotune.backend``)
and the emulator's tools (``simtools/``) reach it or name its variables.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"

#: The data flow, first to last. A name is a top-level module or package of ``autotune``.
ORDER = ("errors", "names", "nccl_values", "figures", "_yaml_lines", "flag_types", "command_line", "sglang", "sim",
         "backend", "nccl", "space", "launch", "server", "bench", "profile", "trial", "tracking", "simtools", "export",
         "search", "cli", "nccl_probe", "bench_search", "__main__", "data")
#: What the emulator core may import besides itself (the issue's rule: the core imports only sglang/).
SIM_CORE_MAY_IMPORT = {"errors", "names", "nccl_values", "sglang"}
#: The modules outside sim/ that may import the emulator or name its AUTOTUNE_SIM_* variables:
#: the registry fills the sim backend's hooks from it; the tools replay and fit its model.
KNOW_THE_EMULATOR = ("autotune.backend", "autotune.simtools")
#: Lazy imports of a later package, each for a command's start-up. None today: a command that
#: wants one lists it here as (importer, imported) with the reason beside it.
LAZY_UPWARD: dict[tuple[str, str], str] = {}
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    """One import of an autotune module by another."""

    src: str  # the importing module, dotted
    dst: str  # the imported module, dotted
    where: str  # path:line
    in_function: bool
    type_checking: bool
    entry: bool = False  # under ``if __name__ == "__main__":``: runs only when the module is the program


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             modules: dict[str, Path]) -> list[str]:
    """The autotune modules an import statement loads (relative imports resolved)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            full = ".".join(base + ([node.module] if node.module else []))
        else:
            full = node.module or ""
        # `from pkg import sub` loads the submodule; `from mod import name` loads the module.
        names = [f"{full}.{a.name}" if f"{full}.{a.name}" in modules else full for a in node.names]
    out = []
    for name in names:
        if name.split(".")[0] != "autotune":
            continue
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def imports() -> list[Import]:
    """Every import of an autotune module inside autotune, at the top or in a function."""
    modules = _modules()
    found: list[Import] = []
    for module, path in modules.items():
        if module == "autotune":
            continue  # the package's own __init__: its version, no layer
        rel = path.relative_to(PACKAGE.parent)

        def visit(tree: ast.AST, in_function: bool, type_checking: bool, entry: bool, module: str = module,
                  path: Path = path, rel: Path = rel) -> None:
            for node in ast.iter_child_nodes(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for dst in dict.fromkeys(_targets(node, module, path.name == "__init__.py", modules)):
                        if dst not in (module, "autotune"):
                            found.append(Import(module, dst, f"{rel}:{node.lineno}", in_function,
                                                type_checking, entry))
                visit(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
                      type_checking or (isinstance(node, ast.If) and _is_type_checking(node)),
                      entry or (isinstance(node, ast.If) and _is_main_guard(node)))

        visit(ast.parse(path.read_text(), filename=str(path)), False, False, False)
    return found


def _package(module: str) -> str:
    """The ORDER entry of a dotted module name (``autotune`` itself is ``__init__``). A package's
    ``__main__`` (``python -m autotune.search``) is a program, not part of its package: it sits with
    the top-level ``__main__`` and may call the command in ``cli/``."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    return parts[1] if len(parts) > 1 else "__init__"


def _rank(i: Import, side: str) -> int:
    """Where an import's end sits in ORDER; a ``python -m`` guard (``if __name__ == "__main__":``)
    makes the importer a program, placed with ``__main__``: it runs only when the module is run."""
    if side == "src" and i.entry:
        return ORDER.index("__main__")
    return ORDER.index(_package(i.src if side == "src" else i.dst))


def test_every_import_points_down_the_data_flow() -> None:
    found = imports()
    unknown = sorted({_package(m) for i in found for m in (i.src, i.dst)} - set(ORDER))
    assert not unknown, f"modules the layout does not place (add them to ORDER and the docs): {unknown}"
    upward = [f"{i.src} -> {i.dst} ({i.where}{', in a function' if i.in_function else ''})" for i in found
              if _rank(i, "dst") > _rank(i, "src")
              and (_package(i.src), _package(i.dst)) not in LAZY_UPWARD]
    assert not upward, "imports against the data flow:\n" + "\n".join(upward)


def cycles(found: list[Import]) -> list[list[str]]:
    """The strongly connected groups of two or more modules of the import graph of an import (a
    ``python -m`` guard's imports run only when the module is the program, after it is loaded)."""
    graph: dict[str, set[str]] = {}
    for i in found:
        if not i.type_checking and not i.entry:
            graph.setdefault(i.src, set()).add(i.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return groups


def test_no_two_modules_import_each_other() -> None:
    found = imports()
    bad = []
    for group in cycles(found):
        edges = [f"  {i.src} -> {i.dst} ({i.where})" for i in found
                 if i.src in group and i.dst in group and not i.type_checking and not i.entry]
        bad.append(" <-> ".join(group) + "\n" + "\n".join(edges))
    assert not bad, "import cycles (move the shared piece down, or pass it in):\n" + "\n".join(bad)


def test_the_cycle_check_sees_a_cycle() -> None:
    fake = [Import("autotune.a", "autotune.b", "a.py:1", True, False),
            Import("autotune.b", "autotune.c", "b.py:1", False, False),
            Import("autotune.c", "autotune.a", "c.py:1", False, False),
            Import("autotune.c", "autotune.d", "c.py:2", False, True),
            Import("autotune.d", "autotune.c", "d.py:1", False, False)]
    assert cycles(fake) == [["autotune.a", "autotune.b", "autotune.c"]]


def test_the_emulator_core_imports_only_sglang() -> None:
    bad = [f"{i.src} -> {i.dst} ({i.where})" for i in imports()
           if _package(i.src) == "sim" and _package(i.dst) not in SIM_CORE_MAY_IMPORT | {"sim"}]
    assert not bad, "\n".join(bad)


def _knows_the_emulator(module: str) -> bool:
    return _package(module) == "sim" or module.startswith(KNOW_THE_EMULATOR)


def test_only_the_backend_registry_reaches_the_emulator() -> None:
    bad = [f"{i.src} -> {i.dst} ({i.where})" for i in imports()
           if _package(i.dst) == "sim" and not _knows_the_emulator(i.src)]
    bad += [f"{m} names AUTOTUNE_SIM_ ({p.relative_to(PACKAGE.parent)})" for m, p in _modules().items()
            if not _knows_the_emulator(m) and "AUTOTUNE_SIM_" in p.read_text()]
    assert not bad, ("the emulator is reached through autotune.backend.get_backend(name).emulator:\n"
                     + "\n".join(bad))


def test_no_module_is_over_the_size_limit() -> None:
    big = {str(p.relative_to(PACKAGE.parent)): n for p in sorted(PACKAGE.rglob("*.py"))
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them along what they do): {big}"


#: The one autotune module that may import the repository's ``benchmarks`` (the research code the
#: package does not ship): ``autotune bench-search``, the thin entry to the sampler benchmark.
MAY_IMPORT_BENCHMARKS = {"autotune/cli/bench_search.py"}


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


#: The modules outside ``cli/`` that define a top-level ``main``, each a process entry point rather
#: than a command a person runs, with why it stays where it is.
MAY_DEFINE_MAIN = {
    "autotune/__main__.py": "the `autotune COMMAND` dispatcher: it runs the commands of cli/",
    "autotune/sim/server.py": "the emulator's launcher (`python -m autotune.sim.server`, as sglang.launch_server): "
                              "the emulator core imports only sglang/",
    "autotune/nccl/worker.py": "a probe worker process the runner spawns, not a command",
    "autotune/server/_reaper.py": "the watchdog process a ServerProcess spawns, not a command",
    "autotune/server/_standby.py": "the standby launcher process a trial spawns (autotune.server.standby), "
                                   "not a command",
    "autotune/data/make_prompts.py": "the maintainer's script that regenerates the packaged prompts file",
}

def test_only_commands_define_main() -> None:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE.parent))
        if rel.startswith("autotune/cli/"):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "main" for n in tree.body):
            found.add(rel)
    stray = sorted(found - set(MAY_DEFINE_MAIN))
    assert not stray, (f"a command's main belongs in autotune/cli/ (an XArgs dataclass and main(argv)); "
                       f"found in {stray}")


# ---- the test suite's own layout: layers, and tests/unit/ mirroring the package -------------------

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("unit", "integration", "e2e", "gpu_kit")


def test_every_test_module_sits_in_a_layer_and_unit_mirrors_the_package() -> None:
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, f"test modules go in a layer ({', '.join(LAYERS)}), not directly in tests/: {loose}"
    unmirrored = sorted(d.name for d in (TESTS / "unit").iterdir()
                        if d.is_dir() and d.name != "__pycache__"
                        and not (PACKAGE / d.name).is_dir() and not (PACKAGE / f"{d.name}.py").is_file())
    assert not unmirrored, f"tests/unit/<name>/ names a package or module of autotune/; not: {unmirrored}"


def test_the_heavy_first_schedule_names_modules_that_exist() -> None:
    from tests.conftest import HEAVY_FIRST

    missing = [name for name in HEAVY_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"tests/conftest.py HEAVY_FIRST names modules that are not there: {missing}"
