"""Static import check of an unpacked GPU kit overlay (see build_kit.sh).

Usage: python3 scripts/gpu/check_kit.py SITE [--full-list FILE] [--also-root DIR --also-entry MOD ...]
                                        [--entry MOD ...] [--verbose]

Starting from the entry modules, it follows the import statements that run when a module is imported
(module level, class bodies, and ``if`` branches other than ``if TYPE_CHECKING``; not functions and
not ``try`` blocks), recursively through every module found in SITE. Each absolute import must resolve
inside SITE, to the standard library of Python 3.12, or to a package the GPU host's image already has.

Exit status 1 when an import reaches a module that the full install had (``--full-list``: the file
list written before trimming) but the trimmed overlay lacks: that is a trimming mistake. Imports that
resolve nowhere and never were in the install (such as ``deep_gemm``) are listed as warnings only.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator

ENTRIES = [
    "sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
    "sglang.srt.managers.tokenizer_manager", "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.model_executor.model_runner", "sglang.srt.models.llama", "sglang.srt.models.llama_eagle3",
    "sglang.srt.models.qwen3_moe", "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.layers.attention.triton_backend", "sglang.srt.layers.sampler", "sglang.bench_serving",
    "ray.tune", "ray.tune.search.optuna", "ray.tune.tuner", "ray.tune.impl.tuner_internal",
    "ray.tune.execution.tune_controller", "ray.tune.trainable.function_trainable", "ray.tune.schedulers",
    "ray.tune.logger", "ray.tune.callback", "ray.tune.search.basic_variant",
    "ray._private.workers.default_worker", "ray._private.log_monitor", "ray.autoscaler._private.monitor",
    "ray.dashboard.agent", "ray._private.runtime_env.agent.main",
    "optuna", "optuna.samplers", "optuna.storages", "optuna.visualization.matplotlib",
    "mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store", "mlflow.store.db.utils",
    "mlflow.store.model_registry.sqlalchemy_store", "alembic.command",
]

# The packages the GPU host's image already has (its Python 3.12 environment) as import names.
IMAGE_DISTS = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py
markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham
simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp""".split()

# distribution name -> import names, where they differ from the name with '-' as '_'
DIST_IMPORTS = {
    "absl-py": ["absl"], "attrs": ["attr", "attrs"], "charset-normalizer": ["charset_normalizer"],
    "cuda-bindings": ["cuda"], "cuda-core": ["cuda"], "cuda-pathfinder": ["cuda"], "cuda-toolkit": [],
    "cupy-cuda13x": ["cupy", "cupyx", "cupy_backends"], "cython": ["Cython", "cython", "pyximport"],
    "fonttools": ["fontTools"], "grpcio": ["grpc"], "hf-xet": ["hf_xet"], "huggingface-hub": ["huggingface_hub"],
    "jax-cuda13-pjrt": ["jax_plugins"], "jax-cuda13-plugin": ["jax_cuda13_plugin", "jax_plugins"],
    "lazy-loader": ["lazy_loader"], "markdown-it-py": ["markdown_it"],
    "matplotlib": ["matplotlib", "mpl_toolkits", "pylab"],
    "meson": ["mesonbuild"], "ml-dtypes": ["ml_dtypes"], "numba-cuda": ["numba_cuda", "numba"],
    "nvidia-ml-py": ["pynvml"], "onnx-ir": ["onnx_ir"], "opencv-python-headless": ["cv2"],
    "orbax-checkpoint": ["orbax"], "pillow": ["PIL"], "prometheus-client": ["prometheus_client"],
    "protobuf": ["google"], "py-cpuinfo": ["cpuinfo"], "pyproject-hooks": ["pyproject_hooks"],
    "pytest": ["pytest", "_pytest", "py"], "python-dateutil": ["dateutil"], "pyyaml": ["yaml", "_yaml"],
    "scikit-build-core": ["scikit_build_core"], "scikit-image": ["skimage"], "scikit-learn": ["sklearn"],
    "sentence-transformers": ["sentence_transformers"],
    "setuptools": ["setuptools", "pkg_resources", "_distutils_hack", "distutils"],
    "tensorboard-data-server": ["tensorboard_data_server"], "toolz": ["toolz", "tlz"],
    "torch-geometric": ["torch_geometric"], "typing-extensions": ["typing_extensions"],
    "typing-inspect": ["typing_inspect"], "wadler-lindig": ["wadler_lindig"],
    "pytorch-lightning": ["pytorch_lightning"],
    "lightning-utilities": ["lightning_utilities"], "linear-operator": ["linear_operator"],
    "interface-meta": ["interface_meta"], "mypy-extensions": ["mypy_extensions"],
    "pyre-extensions": ["pyre_extensions"],
    "opt-einsum": ["opt_einsum"], "opt-einsum-fx": ["opt_einsum_fx"], "annotated-doc": ["annotated_doc"],
}
for _d in list(IMAGE_DISTS):
    if _d.startswith("nvidia-"):
        DIST_IMPORTS.setdefault(_d, ["nvidia"])
    if _d.startswith("pytest-"):
        DIST_IMPORTS.setdefault(_d, [_d.replace("-", "_")])
IMAGE = {n for d in IMAGE_DISTS for n in DIST_IMPORTS.get(d, [d.replace("-", "_")])}

REMOVED_IN_312 = {"asynchat", "asyncore", "distutils", "imp", "smtpd"}
STDLIB = (set(sys.stdlib_module_names) - REMOVED_IN_312) | {"__future__", "__main__"}
PY = (3, 12)
EXT_SUFFIXES = (".cpython-312-x86_64-linux-gnu.so", ".abi3.so", ".so")


def index(paths: Iterable[str]) -> dict[str, str]:
    """module name -> relative file ('' for a namespace directory) from relative file paths."""
    mods: dict[str, str] = {}
    for rel in paths:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            mods.setdefault(".".join(parts[:i]), "")
        name = parts[-1]
        stem = None
        if name.endswith(".py"):
            stem = name[:-3]
        else:
            for suf in EXT_SUFFIXES:
                if name.endswith(suf):
                    stem = name[: -len(suf)]
                    break
        if stem is None or "." in stem:
            continue
        if stem == "__init__":
            if len(parts) > 1:
                mods[".".join(parts[:-1])] = rel
        else:
            key = ".".join(parts[:-1] + [stem])
            if not mods.get(key, "").endswith(".py"):
                mods[key] = rel
    return mods


def walk_files(root: str) -> list[str]:
    out: list[str] = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def const_eval(test: ast.expr) -> bool | None:
    """True/False for tests we can decide for Linux/CPython 3.12, else None."""
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = const_eval(test.operand)
        return None if v is None else not v
    if isinstance(test, ast.BoolOp):
        vals = [const_eval(v) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in vals else (True if all(v is True for v in vals) else None)
        return True if True in vals else (False if all(v is False for v in vals) else None)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        src = ast.unparse(left)
        try:
            val = ast.literal_eval(right)
        except Exception:
            return None
        if src in ("sys.version_info", "sys.version_info[:2]") and isinstance(val, tuple):
            lhs: object = PY[: len(val)] if len(val) <= 2 else PY + (0,) * (len(val) - 2)
        elif src == "sys.platform":
            lhs = "linux"
        elif src == "os.name":
            lhs = "posix"
        elif src in ("platform.system()",):
            lhs = "Linux"
        else:
            return None
        ops = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
               ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
        if type(op) in ops:
            try:
                return ops[type(op)](lhs, val)
            except TypeError:
                return None
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(val, (tuple, list, set)):
            return (lhs in val) == isinstance(op, ast.In)
    if isinstance(test, ast.Call) and ast.unparse(test.func) == "sys.platform.startswith":
        try:
            return "linux".startswith(ast.literal_eval(test.args[0]))
        except Exception:
            return None
    return None


def find_spec_parents(node: ast.AST) -> Iterator[str]:
    """Parents named by ``find_spec("a.b")`` calls in a module-level statement: find_spec imports the
    parent ``a`` and raises ModuleNotFoundError when it is missing (mlflow does this for databricks)."""
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Call) and ast.unparse(sub.func).endswith("find_spec") and sub.args
                and isinstance(sub.args[0], ast.Constant) and isinstance(sub.args[0].value, str)
                and "." in sub.args[0].value):
            yield sub.args[0].value.rpartition(".")[0]


class FindSpecImport(ast.Import):
    """The synthetic ``import a`` of a module-level ``find_spec("a.b")``: a missing ``a`` is fatal."""


def import_stmts(body: list[ast.stmt], conditional: bool = False,
                 ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(node, conditional) for the import statements that run at import time; for a module-level
    ``find_spec("a.b")``, a synthetic ``import a``."""
    for node in body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr)):
            for parent in find_spec_parents(node):
                yield FindSpecImport(names=[ast.alias(name=parent)]), conditional
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, conditional
        elif isinstance(node, ast.If):
            v = const_eval(node.test)
            if v is not False:
                yield from import_stmts(node.body, conditional or v is None)
            if v is not True:
                yield from import_stmts(node.orelse, conditional or v is None)
        elif isinstance(node, ast.ClassDef):
            yield from import_stmts(node.body, conditional)
        elif isinstance(node, ast.With):
            if not any("suppress" in ast.unparse(item.context_expr) for item in node.items):
                yield from import_stmts(node.body, conditional)
        elif isinstance(node, (ast.For, ast.While)):
            yield from import_stmts(node.body, conditional)
        # functions and try blocks are skipped on purpose


class Checker:
    def __init__(self, roots: list[tuple[str, dict[str, str]]], full_mods: set[str]) -> None:
        self.roots = roots  # [(root, mods)]
        self.full = full_mods
        self.seen: set[str] = set()
        self.parent: dict[str, str] = {}  # module -> the module whose import first reached it
        self.errors: defaultdict[str, set[str]] = defaultdict(set)    # module -> importers (trimmed away)
        self.warnings: defaultdict[str, set[str]] = defaultdict(set)  # module -> importers (never there)
        self.parse_failed: list[str] = []

    def find(self, mod: str) -> tuple[str, str] | None:
        for root, mods in self.roots:
            if mod in mods:
                return root, mods[mod]
        return None

    def top_known(self, top: str) -> bool:
        return any(top in mods for _, mods in self.roots)

    def resolve(self, mod: str, importer: str, cond: bool, follow: bool = True) -> bool:
        """Check that mod and its parents import; follow the files found."""
        parts = mod.split(".")
        top = parts[0]
        if not self.top_known(top):
            if top in STDLIB or top in IMAGE:
                return True
            (self.warnings if top not in self.full else self.errors)[mod].add(importer + (" [if]" if cond else ""))
            return False
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            hit = self.find(name)
            if hit is None:
                if top in IMAGE:   # a namespace shared with the image (e.g. nvidia, google)
                    return True
                bucket = self.errors if name in self.full else self.warnings
                bucket[name].add(importer + (" [if]" if cond else ""))
                return False
            if follow:
                self.visit(name, hit, importer)
        return True

    def visit(self, name: str, hit: tuple[str, str], importer: str) -> None:
        if name in self.seen:
            return
        self.seen.add(name)
        self.parent[name] = importer
        root, rel = hit
        if not rel.endswith(".py"):
            return  # namespace directory or extension module
        path = os.path.join(root, rel)
        try:
            tree = ast.parse(open(path, "rb").read(), filename=path)
        except (SyntaxError, ValueError) as exc:
            self.parse_failed.append(f"{rel}: {exc.__class__.__name__}")
            return
        is_pkg = rel.endswith("__init__.py")
        package = name if is_pkg else name.rpartition(".")[0]
        for node, cond in import_stmts(tree.body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if not self.resolve(alias.name, name, cond) and isinstance(node, FindSpecImport):
                        # not a guarded import: find_spec itself raises, so this is fatal
                        self.errors[alias.name] |= self.warnings.pop(alias.name, set())
                continue
            if node.level:
                parts = package.split(".")
                if node.level > 1:
                    parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts)
                target = f"{base}.{node.module}" if node.module else base
            elif node.module:
                target = node.module
            else:
                continue
            if not self.resolve(target, name, cond):
                continue
            top = target.split(".")[0]
            if not self.top_known(top):
                continue
            for alias in node.names:
                if alias.name == "*":
                    continue
                sub = f"{target}.{alias.name}"
                found = self.find(sub)
                if found is not None:
                    self.visit(sub, found, name)
                elif sub in self.full:
                    self.errors[sub].add(name + (" [if]" if cond else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site")
    ap.add_argument("--full-list", help="relative paths of the untrimmed install, one a line")
    ap.add_argument("--entry", action="append", help="entry module (repeatable; default: the built-in list)")
    ap.add_argument("--also-root", action="append", default=[], help="another source root searched after SITE")
    ap.add_argument("--also-entry", action="append", default=[], help="entry module found in an --also-root")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)

    site_mods = index(walk_files(a.site))
    roots = [(a.site, site_mods)]
    for r in a.also_root:
        roots.append((r, index(p for p in walk_files(r) if p.split("/")[0] in
                               {e.split(".")[0] for e in a.also_entry})))
    full = set()
    if a.full_list:
        with open(a.full_list) as fh:
            full = set(index(line.rstrip("\n") for line in fh if line.strip()))
    ck = Checker(roots, full)
    missing_entries = []
    for e in (a.entry or ENTRIES) + a.also_entry:
        if ck.find(e) is None:
            missing_entries.append(e)
            if e in full:
                ck.errors[e].add("(entry)")
            continue
        ck.resolve(e, "(entry)", False)

    def chain(importers: Iterable[str]) -> str:
        imp = sorted(importers)[0].split(" ")[0]
        path = [imp]
        while ck.parent.get(path[-1], "(entry)") != "(entry)" and len(path) < 12:
            path.append(ck.parent[path[-1]])
        return " <- ".join(path)

    print(f"check_kit: {len(ck.seen)} modules reached from {len((a.entry or ENTRIES)) + len(a.also_entry)} entries")
    if missing_entries:
        print("  entries not in the overlay:", ", ".join(missing_entries))
    if ck.parse_failed:
        print(f"  {len(ck.parse_failed)} files this Python ({sys.version.split()[0]}) could not parse: "
              + "; ".join(ck.parse_failed[:5]))
    if ck.warnings:
        print(f"  {len(ck.warnings)} imports resolve nowhere (never in the install; guarded at run time or unused):")
        for m in sorted(ck.warnings):
            imps = sorted(ck.warnings[m])
            print(f"    {m:45s} <- {', '.join(imps[:3])}{' ...' if len(imps) > 3 else ''}")
    if ck.errors:
        print(f"  ERROR: {len(ck.errors)} modules imported at import time are missing (removed by trimming, "
              "or the parent of a module-level find_spec):")
        for m in sorted(ck.errors):
            imps = sorted(ck.errors[m])
            print(f"    {m:45s} <- {', '.join(imps[:3])}{' ...' if len(imps) > 3 else ''}")
            print(f"        via {chain(imps)}")
        return 1
    if a.verbose:
        for m in sorted(ck.warnings):
            print(f"    {m}: via {chain(ck.warnings[m])}")
        for m in sorted(ck.seen):
            print("   ", m)
    print("check_kit: OK (nothing that trimming removed is imported at module level)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
