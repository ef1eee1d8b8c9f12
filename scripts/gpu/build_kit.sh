#!/usr/bin/env bash
# Build ONE carry-able overlay for the remote H200 host (Python 3.12, torch 2.11.0+cu130, no network there):
# SGLang 0.5.17 (the pins of shared/gpu/build_site.sh) + ray[tune] 2.60.0 + optuna 5.0.0 +
# mlflow-skinny 3.17.2 with what its sqlite tracking store needs, trimmed to fit what one call to the
# host carries (64 MiB).
#
# Usage (here, from the repo root; needs PyPI): bash scripts/gpu/build_kit.sh [OUTDIR]   (default .gpu/kit)
# Writes OUTDIR/site.tar.xz (at most scripts/gpu/carry.py's KIT_LIMIT, 51 MiB) and OUTDIR/sizes.txt. Downloads are kept in
# .gpu/kit-build/wheels, so a re-run downloads nothing. Env: KEEP_SITE=1 keeps the unpacked tree
# (.gpu/kit-build/site); SIZES=raw skips the per-package xz estimate; XZ_THREADS (default 2);
# SMOKE_PY=/path/to/python3.12 adds a real import/run test of the tuning stack (see step 6).
# About 6.5 min on 2 cores with the wheels cached (xz about 4 min of it).
# On the host: python3 scripts/gpu/prepare_kit.py .gpu/kit/site.tar.xz   (unpacks to /tmp/site), then
#   export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# (add :/tmp/site/_standins for sglang.bench_serving, which imports `datasets`).
set -euo pipefail
T0=$(date +%s)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUTDIR=$(mkdir -p "${1:-$REPO/.gpu/kit}" && cd "${1:-$REPO/.gpu/kit}" && pwd)
WORK=$REPO/.gpu/kit-build
SITE=$WORK/site
# One call carries the repo, the kit and the plan's state: carry.py holds the budget.
LIMIT=$(python3 "$REPO/scripts/gpu/carry.py" --kit-limit)
XZ_THREADS=${XZ_THREADS:-2}
PIP=${PIP:-python3 -m pip}
mkdir -p "$WORK/wheels"
step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }

# ---------------------------------------------------------------- 1. wheels (cp312, manylinux x86_64)
PLAT="--platform linux_x86_64 --platform manylinux2014_x86_64"
for n in $(seq 17 39); do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done
# SGLang side: exactly build_site.sh's pins.
PINS_SGLANG="sglang==0.5.17 sglang-kernel==0.4.5 transformers==5.12.1 tokenizers==0.22.2
flashinfer-python==0.6.15.post1 apache-tvm-ffi==0.1.11 xgrammar==0.2.1
pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
fastapi==0.165.0 starlette==1.10.0 opentelemetry-api==1.45.2 uvicorn==0.54.0
orjson==3.13.0 pybase64==1.5.1 msgspec==0.23.0 pyzmq==27.3.0 setproctitle==1.3.8
python-multipart==0.0.34 partial-json-parser==0.2.1.1.post7 openai==2.6.1 jiter==0.19.0
distro==1.9.0 sniffio==1.3.1 dill==0.4.1 compressed-tensors==0.20.1 loguru==0.7.3
gguf==0.19.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
rpds-py==2026.9.1 soundfile==0.13.1 cffi==2.1.1 pycparser==3.12 interegular==0.3.3"
# Tuning side: what ray[tune], optuna and mlflow-skinny require (Requires-Dist without extras) that the
# image lacks; the shared ones (pydantic, fastapi, starlette, uvicorn, opentelemetry-api, jsonschema) are
# the SGLang pins above. mlflow-skinny 3.17.2 does not require mlflow-tracing (a subset of the same
# `mlflow` package), so it is left out. databricks-sdk (a requirement of mlflow-skinny) is left out: mlflow
# imports it only for Databricks URIs. nvidia-ml-py (pynvml, pure Python) is the trials' GPU telemetry
# (autotune.profile.nvml); the kit built before 2026-12-02 lacks it, and its trials record None.
PINS_TUNE="ray==2.60.0 optuna==5.0.0 mlflow-skinny==3.17.2 tensorboardX==2.6.5 colorlog==6.12.0
sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 cachetools==7.3.3 gitpython==3.2.1 gitdb==4.0.12
smmap==5.0.3 importlib-metadata==8.7.1 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2
opentelemetry-semantic-conventions==0.66b2 python-dotenv==1.2.4 sqlparse==0.6.1
nvidia-ml-py==13.615.71"
PINS="$PINS_SGLANG $PINS_TUNE"
step "download (cached in $WORK/wheels)"
$PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
    -d "$WORK/wheels" $PINS 2>&1 | grep -v "is ignored: it is neither" || true
# Exactly the pinned wheels (an older download of another version would be a second copy).
WHEELS=$(python3 - "$WORK/wheels" $PINS <<'EOF'
import os, re, sys
d, pins = sys.argv[1], sys.argv[2:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
files = os.listdir(d)
out = []
for p in pins:
    name, ver = p.split("==")
    hits = [f for f in files if f.endswith(".whl") and norm(f.split("-")[0]) == norm(name) and f.split("-")[1] == ver]
    if len(hits) != 1:
        sys.exit(f"wheel for {p}: {hits or 'missing'}")
    out.append(os.path.join(d, hits[0]))
print("\n".join(out))
EOF
)

# ---------------------------------------------------------------- 2. install into a fresh tree
step "install $(echo "$WHEELS" | wc -l) wheels into $SITE"
rm -rf "$SITE"
# shellcheck disable=SC2086
$PIP install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
    --target "$SITE" $WHEELS 2>&1 | grep -v "Running pip as the 'root' user\|is ignored: it is neither" || true
cd "$SITE"
find . -name __pycache__ -prune -exec rm -rf {} +
find . \( -type f -o -type l \) | sed 's|^\./||' | sort > "$WORK/full-files.txt"
RAW0=$(du -sb . | cut -f1)

# ---------------------------------------------------------------- 3. trim
step "trim (installed: $((RAW0 / 1048576)) MiB raw)"
# Each entry: what goes and why. The static check (step 6) fails the build if anything removed here is
# imported at module level from the entry modules.
rm -rf bin tools build_backend.py build_utils.py                                 # console scripts, build helpers
# sglang-kernel: FA3 (1.1 GB, only --attention-backend fa3), Blackwell build, InfLLM and FlashMLA ops
# (MLA models only; sgl_kernel.flash_mla imports flashmla_ops inside try)
rm -rf sgl_kernel/flash_ops.abi3.so sgl_kernel/sm100 sgl_kernel/infllm_ops*.so sgl_kernel/flashmla_ops.abi3.so
# xgrammar: the static library and headers (the Python module and its bindings stay: sglang's
# function-call parsers import xgrammar at module level even with --grammar-backend none)
rm -rf xgrammar/lib xgrammar/include
# sglang: the diffusion runtime and the test suite (neither is imported by the LLM server), and the three
# Rust extensions, each imported only inside the function that its option turns on: the embedded Rust
# server (SGLANG_RUST_SERVER), the native gRPC server (--grpc-port), Inkling's image preprocessing
rm -rf sglang/multimodal_gen sglang/test
rm -f sglang/srt/server/_core.*.so sglang/srt/grpc/_core.*.so sglang/srt/multimodal/_core.*.so
# sglang: tuned Triton configs for other GPUs. The fused-MoE ones are looked up by device name, so only
# the NVIDIA_H200 files are kept (the per-SM-arch kernel configs beside them, *_sm_90.json etc., stay);
# the fp8/int8 block-quant GEMM configs serve only fp8/int8 checkpoints.
find sglang/srt/layers/moe -path '*configs*' -name '*device_name=*.json' ! -name '*NVIDIA_H200*' -delete
rm -rf sglang/kernels/ops/quantization/configs
# flashinfer: the CUTLASS tree (only its GEMM/MoE/fp8 kernels include it; the norm kernel that sgl_kernel's
# RMSNorm JIT-compiles needs include/, csrc/, spdlog/ and the cccl headers, which stay) and cccl's
# docs/tests/python
rm -rf flashinfer/data/cutlass
( cd flashinfer/data/cccl && find . -mindepth 1 -maxdepth 1 ! -name cub ! -name thrust ! -name libcudacxx -exec rm -rf {} + \
    && find libcudacxx -mindepth 1 -maxdepth 1 ! -name include -exec rm -rf {} + )
# tvm-ffi: libbacktrace's C sources (used to build tvm-ffi itself; JIT builds use include/ and dlpack)
rm -rf tvm_ffi/3rdparty/libbacktrace
# ray: the Java jars, the dashboard web client, and libraries ray.tune never imports
rm -rf ray/jars ray/dashboard/client/build ray/rllib ray/serve ray/llm
rm -rf ray/tune/examples ray/train/examples ray/serve ray/util/spark ray/util/dask
# generic: test suites, benchmarks, examples, type stubs, install records
find . -type d \( -name tests -o -name benchmarks -o -name examples \) -prune -exec rm -rf {} +
find . -type d -name test ! -path './sglang/*' -prune -exec rm -rf {} +
find . -name '*.pyi' -delete
find . -path '*.dist-info/RECORD' -delete

# ---------------------------------------------------------------- 4. stand-ins
step "stand-ins"
# IPython: sglang/utils.py imports IPython.display at module level (as in build_site.sh)
# Ray's logging calls IPython.get_ipython once the module is loaded, and matplotlib reads
# IPython.version_info (8.24+ means "nothing to patch"): without both a trial's plot crashed.
mkdir -p IPython && printf 'version_info = (8, 24, 0, "final", 0)\n\n\ndef get_ipython():\n    return None\n' > IPython/__init__.py
printf 'class HTML:\n    def __init__(self, data=None, *a, **k):\n        self.data = data\n\n\ndef display(*o, **k):\n    print(*[getattr(x, "data", x) for x in o])\n' > IPython/display.py
# cryptography.fernet: mlflow's sqlalchemy store imports its model-registry tables, whose webhook-secret
# column builds a Fernet cipher at import time. Only webhooks encrypt with it; the stand-in makes keys and
# refuses to encrypt. (The real cryptography is a 4.7 MB wheel, 15 MB unpacked.)
mkdir -p cryptography
cat > cryptography/__init__.py <<'EOF'
"""Stand-in for the parts of `cryptography` that mlflow's sqlalchemy store touches at import time."""
__version__ = "0+kit-stand-in"
EOF
cat > cryptography/fernet.py <<'EOF'
"""Stand-in Fernet: mlflow builds one at import time for its webhook-secret column; webhooks are unused."""
import base64
import os


class InvalidToken(Exception):
    pass


class Fernet:
    def __init__(self, key, backend=None):
        self._key = key

    @classmethod
    def generate_key(cls):
        return base64.urlsafe_b64encode(os.urandom(32))

    def encrypt(self, data):
        raise NotImplementedError("cryptography is a stand-in in this overlay (webhook secrets unsupported)")

    decrypt = encrypt
EOF
# databricks: mlflow asks importlib.util.find_spec("databricks.agents") at import time, which raises
# when there is no `databricks` at all. databricks-sdk (and its google-auth) is not carried: an empty
# namespace makes find_spec answer None, as for an install without the Databricks extras.
mkdir -p databricks
printf '"""Stand-in namespace: databricks-sdk is not in this overlay (mlflow only probes for it)."""\n__path__ = __import__("pkgutil").extend_path(__path__, __name__)\n' > databricks/__init__.py
# datasets: sglang.bench_serving imports it at module level. Kept OUT of the import path (a `datasets` that
# importlib finds could make transformers/mlflow take their datasets code paths); add it explicitly:
#   PYTHONPATH=/tmp/site:/tmp/site/_standins python3 -m sglang.bench_serving ...
mkdir -p _standins/datasets
cat > _standins/datasets/__init__.py <<'EOF'
"""Stand-in `datasets` for sglang.bench_serving with the random/synthetic datasets only."""
__version__ = "0+kit-stand-in"


def _missing(*a, **k):
    raise ImportError("datasets is a stand-in in this overlay; use a random/synthetic dataset")


load_dataset = load_from_disk = _missing


class Dataset:
    def __init__(self, *a, **k):
        _missing()


DatasetDict = IterableDataset = Dataset
EOF

# ---------------------------------------------------------------- 5. strip symbols from ELF files
# Only files that still have a symbol table or debug sections (Ray's binaries, _raylet.so, tokenizers, the
# xgrammar bindings, Cython modules, libsndfile...); already-stripped ones, such as the auditwheel-patched
# libraries in pyzmq.libs, are left byte for byte. --strip-unneeded keeps the dynamic symbols that loading
# and Python's extension lookup use; a file strip fails on is kept as it was.
step "strip ELF symbol tables and debug info"
BEFORE=$(du -sb . | cut -f1)
NSTRIP=0
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    readelf -SW "$f" 2>/dev/null | grep -q ' \.symtab \| \.debug_' || continue
    if cp -p "$f" "$f.strip" && strip --strip-unneeded "$f.strip" 2>/dev/null; then
        mv "$f.strip" "$f"; NSTRIP=$((NSTRIP + 1))
    else
        rm -f "$f.strip"
    fi
done < <(find . -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) -print0)
echo "   stripped $NSTRIP files, $(( (BEFORE - $(du -sb . | cut -f1)) / 1048576 )) MiB raw"

# ---------------------------------------------------------------- 6. static import check
step "static import check"
python3 "$REPO/scripts/gpu/check_kit.py" "$SITE" --full-list "$WORK/full-files.txt" \
    --also-root "$REPO" --also-entry autotune.search.run --also-entry autotune.cli.search --also-entry autotune.trial.measure --also-entry autotune.cli.trial --also-entry autotune.tracking.tracker \
    --also-entry autotune.search.trainable --also-entry autotune.search.searcher --also-entry autotune.search.prescreen

# Optional: a real import test, where a CPython 3.12 is at hand (no torch, no GPU needed). SMOKE_PY names
# a python3.12 that has the image's pure packages the tuning stack uses (numpy pandas pyyaml requests
# protobuf click packaging filelock msgpack aiohttp psutil jinja2 typing-extensions anyio httpx attrs
# cloudpickle tqdm pyarrow fsspec zipp huggingface-hub safetensors regex typer prometheus-client grpcio).
# It imports the compiled modules (catching a broken strip), runs MLflow and Optuna on sqlite, and a
# 4-trial Ray Tune + OptunaSearch run on a local Ray (its gcs_server and raylet included).
if [ -n "${SMOKE_PY:-}" ]; then
    step "import smoke test with $SMOKE_PY"
    SMOKE_DIR=$(mktemp -d)
    set +e
    ( cd "$SMOKE_DIR" && PYTHONPATH="$SITE" RAY_USAGE_STATS_ENABLED=0 timeout 600 "$SMOKE_PY" - "$SMOKE_DIR" <<'PYEOF'
import importlib, sys, time
tmp = sys.argv[1]
t = time.time()
bad = []
for m in ["pydantic_core", "tokenizers", "msgspec", "orjson", "jiter", "rpds", "setproctitle", "pybase64", "zmq",
          "_cffi_backend", "soundfile", "tvm_ffi", "sqlalchemy.engine._row_cy", "ray._raylet", "fastapi",
          "uvicorn", "openai", "gguf", "ray.tune", "ray.tune.search.optuna", "optuna", "mlflow",
          "mlflow.store.tracking.sqlalchemy_store", "alembic", "tensorboardX"]:
    try:
        importlib.import_module(m)
    except Exception as exc:
        bad.append(f"{m}: {type(exc).__name__}: {exc}")
if bad:
    sys.exit("smoke: imports failed:\n  " + "\n  ".join(bad))
import mlflow
mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
mlflow.set_experiment("kit-smoke")
with mlflow.start_run() as run:
    mlflow.log_param("p", 1)
    mlflow.log_metric("m", 2.5, step=1)
assert mlflow.MlflowClient().get_run(run.info.run_id).data.metrics == {"m": 2.5}
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(storage=f"sqlite:///{tmp}/optuna.db", study_name="s")
study.optimize(lambda tr: (tr.suggest_float("x", -1, 1) - 0.3) ** 2, n_trials=5)
import ray
from ray import tune
from ray.tune.search.optuna import OptunaSearch
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False, _temp_dir=f"{tmp}/r")
try:
    def trainable(config):
        tune.report({"loss": (config["x"] - 0.3) ** 2})
    res = tune.Tuner(trainable, param_space={"x": tune.uniform(-1, 1)},
                     tune_config=tune.TuneConfig(search_alg=OptunaSearch(), metric="loss", mode="min",
                                                 num_samples=4),
                     run_config=tune.RunConfig(storage_path=f"{tmp}/ray", name="smoke", verbose=0)).fit()
    assert len(res) == 4 and not res.errors, res.errors
finally:
    ray.shutdown()
print(f"smoke: OK in {time.time() - t:.0f} s (compiled modules, MLflow + Optuna on sqlite, Ray Tune 4 trials)")
PYEOF
    ) > "$WORK/smoke.log" 2>&1
    rc=$?
    set -e
    rm -rf "$SMOKE_DIR"
    grep "^smoke:\|Error\|error:" "$WORK/smoke.log" | grep -v "Warning" | tail -20 || true
    [ "$rc" = 0 ] || { echo "ERROR: smoke test failed (rc $rc), see $WORK/smoke.log" >&2; exit 1; }
fi

# ---------------------------------------------------------------- 7. tar (paths relative to the site root)
# and xz. Order: ELF files first, largest first (Ray's three binaries share much code), then the rest by
# extension, name and path, so that alike files sit together. The x86 BCJ filter shrinks machine code by
# about 5% and leaves text alone (it only rewrites E8/E9 bytes followed by a 00/FF-ended address).
step "tar + xz (threads $XZ_THREADS)"
python3 - > "$WORK/order.txt" <<'EOF'
import os
rows = []
for d, dirs, files in os.walk("."):
    for f in files:
        p = os.path.join(d, f)[2:]
        with open(p, "rb") as fh:
            elf = fh.read(4) == b"\x7fELF"
        base = os.path.basename(p)
        if elf:
            rows.append(("", -os.path.getsize(p), p))
        else:
            rows.append((base.rsplit(".", 1)[1].lower() if "." in base else "~", base, p))
rows.sort()
print("\n".join(r[2] for r in rows))
EOF
tar --no-recursion --owner=0 --group=0 --numeric-owner -cf - -T "$WORK/order.txt" \
    | xz -T"$XZ_THREADS" --x86 --lzma2=preset=9e,dict=256MiB > "$OUTDIR/site.tar.xz.part"
mv "$OUTDIR/site.tar.xz.part" "$OUTDIR/site.tar.xz"
SIZE=$(stat -c %s "$OUTDIR/site.tar.xz")
RAW=$(du -sb . | cut -f1)

# ---------------------------------------------------------------- 8. size table
step "size table"
python3 - "$SITE" "$OUTDIR/sizes.txt" "$SIZE" "$RAW0" "$RAW" "${SIZES:-xz}" "$XZ_THREADS" "$LIMIT" <<'EOF'
import os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
site, out, size, raw0, raw, mode, threads, LIMIT = sys.argv[1:9]
size, raw0, raw, LIMIT = int(size), int(raw0), int(raw), int(LIMIT)
groups = {}
for top in sorted(os.listdir(site)):
    key = top
    if top.endswith(".dist-info"):
        key = "(dist-info)"
    elif os.path.isfile(os.path.join(site, top)):
        key = top.split(".")[0].lstrip("_")
    groups.setdefault(key, []).append(top)
def du(paths):
    n = 0
    for p in paths:
        p = os.path.join(site, p)
        if os.path.isfile(p):
            n += os.path.getsize(p)
        for d, _, fs in os.walk(p):
            n += sum(os.path.getsize(os.path.join(d, f)) for f in fs if not os.path.islink(os.path.join(d, f)))
    return n
def xz(paths):
    tar = subprocess.Popen(["tar", "-C", site, "-cf", "-", *paths], stdout=subprocess.PIPE)
    res = subprocess.run(["xz", "-T1", "--x86", "--lzma2=preset=9e,dict=64MiB"], stdin=tar.stdout, capture_output=True)
    tar.wait()
    return len(res.stdout)
rows = {k: [du(v), None] for k, v in groups.items()}
if mode == "xz":
    keys = sorted(rows, key=lambda k: -rows[k][0])
    with ThreadPoolExecutor(max(1, int(threads))) as ex:
        for k, n in zip(keys, ex.map(lambda k: xz(groups[k]), keys)):
            rows[k][1] = n
order = sorted(rows, key=lambda k: -(rows[k][1] or rows[k][0]))
lines = [f"site.tar.xz: {size} bytes = {size / 1048576:.2f} MiB (limit {LIMIT / 1048576:.0f} MiB = {LIMIT} bytes)",
         f"raw tree: {raw / 1048576:.1f} MiB after trimming (installed: {raw0 / 1048576:.1f} MiB)",
         "per top-level entry: raw bytes; xz = that entry alone, xz --x86 -9e (the solid archive is smaller in sum,",
         "since entries share a dictionary; the xz column says where the bytes go, not exact shares)", "",
         f"{'entry':28s} {'raw MiB':>9s} {'xz MiB':>8s}"]
small = [0, 0]
for k in order:
    r, x = rows[k]
    if (x or r) < 60_000:
        small[0] += r; small[1] += x or 0
        continue
    lines.append(f"{k:28s} {r / 1048576:9.2f} {'' if x is None else f'{x / 1048576:8.2f}'}")
lines.append(f"{'(smaller entries)':28s} {small[0] / 1048576:9.2f} {small[1] / 1048576 if mode == 'xz' else '':8.2f}"
             if mode == "xz" else f"{'(smaller entries)':28s} {small[0] / 1048576:9.2f}")
if mode == "xz":
    lines.append(f"{'sum of separate xz':28s} {'':9s} {sum(v[1] for v in rows.values()) / 1048576:8.2f}")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
[ "${KEEP_SITE:-0}" = 1 ] || { cd "$WORK" && rm -rf "$SITE"; }
step "done: $OUTDIR/site.tar.xz $SIZE bytes ($(( SIZE * 100 / LIMIT ))% of $(( LIMIT / 1048576 )) MiB)"
if [ "$SIZE" -gt "$LIMIT" ]; then echo "ERROR: site.tar.xz is over $(( LIMIT / 1048576 )) MiB (scripts/gpu/carry.py)" >&2; exit 1; fi
