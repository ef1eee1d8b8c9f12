"""Issue 32's seam figures for a checkout: parameters typed exactly ``Any`` among all parameters,
and import statements of autotune's own modules inside functions.

Usage: ``python3 scripts/seams.py [CHECKOUT]`` (default: this checkout).
"""

from __future__ import annotations

import ast
import pathlib
import sys


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "autotune"
    return any(a.name.split(".")[0] == "autotune" for a in node.names)


def main(root: pathlib.Path) -> None:
    anys = total = inside = 0
    for path in sorted((root / "autotune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]:
                if arg.arg in ("self", "cls"):
                    continue
                total += 1
                if arg.annotation is not None and ast.unparse(arg.annotation) in ("Any", "typing.Any"):
                    anys += 1
            inside += sum(1 for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom)) and _own(sub))
    print(f"parameters typed exactly Any: {anys} / {total} ({100 * anys / max(total, 1):.1f}%)")
    print(f"own-module import statements inside functions: {inside}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1])
