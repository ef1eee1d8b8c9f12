#!/usr/bin/env bash
# SGLang 0.5.17's own modules importable on this machine (no GPU), for checks of what its imports
# do (scripts/gpu/rebind_probe.py), not for serving:
#   bash scripts/gpu/sglang_cpu_env.sh DIR
#   PYTHONPATH=DIR .venv-sglang-data/bin/python scripts/gpu/rebind_probe.py --out OUT
# DIR gets the 0.5.17 wheel unpacked, the packages its scheduler imports that the data environment
# (.venv-sglang-data: CPU torch 2.13, `make test` builds it) lacks, pinned where 0.5.17 pins them,
# and a stand-in for torchvision: no torchvision build on PyPI matches the CPU torch, and SGLang
# only imports names from it at import (every torchvision module and name is a placeholder).
set -euo pipefail
DIR=${1:?usage: sglang_cpu_env.sh DIR}
PY=${PY:-.venv-sglang-data/bin/python}
mkdir -p "$DIR"
"$PY" -m pip download -q --no-deps -d "$DIR/.wheels" "sglang==0.5.17"
"$PY" -c 'import sys, zipfile, glob; zipfile.ZipFile(glob.glob(sys.argv[1] + "/.wheels/sglang-0.5.17-*.whl")[0]).extractall(sys.argv[1])' "$DIR"
"$PY" -m pip install -q --no-deps --target "$DIR" "transformers==5.12.1" "tokenizers>=0.22.0,<=0.23.0" \
  apache-tvm-ffi==0.1.15.post2 compressed-tensors==0.20.1 einops==0.8.2 gguf==0.19.0 httpx2==2.17.0 \
  loguru==0.7.3 openai==3.63.0 partial-json-parser==0.2.1.1.post7 sentencepiece==0.2.3 setproctitle==1.3.8 \
  sniffio==1.3.1 xgrammar==0.2.9
cat > "$DIR/autotune_torchvision_stand_in.py" <<'PY'
"""torchvision for an import check only: any torchvision module, any name in it a placeholder."""
import importlib.abc
import importlib.machinery
import sys
import types


class _Any:
    def __init__(self, *args, **kwargs): pass
    def __call__(self, *args, **kwargs): return _Any()
    def __getattr__(self, name): return _Any()
    def __mro_entries__(self, bases): return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__, module.__version__, module.__file__ = [], "0.28.0", __file__
        return module

    def exec_module(self, module): pass


sys.meta_path.insert(0, _Finder())
PY
echo "import autotune_torchvision_stand_in" > "$DIR/sitecustomize.py"
mkdir -p "$DIR/torchvision-0.28.0.dist-info"
printf "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n" > "$DIR/torchvision-0.28.0.dist-info/METADATA"
echo torchvision > "$DIR/torchvision-0.28.0.dist-info/top_level.txt"
PYTHONPATH="$DIR" "$PY" -c 'import sglang, sglang.srt.managers.scheduler, sglang.srt.managers.detokenizer_manager; print("sglang", sglang.__version__, "scheduler imported")'
