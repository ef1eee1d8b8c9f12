"""On the remote GPU host: make the kit's overlay ready in /tmp/site (see build_kit.sh).

Usage (from the repo root, with .gpu/kit carried):
    python3 scripts/gpu/prepare_kit.py .gpu/kit/site.tar.xz [--target /tmp/site] && export PYTHONPATH=/tmp/site

Steps, each timed: unpack (skipped when the target already holds this tarball, by its stamp), the
deep_gemm guard (0.5.17's dsa_backend imports deep_gemm unguarded, and the EAGLE graph capture reaches it;
the overlay has no deep_gemm and dense bf16 models never call it), and byte-compiling the whole overlay in
parallel, so that each server process does not compile it again. Running it again is cheap and safe.
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
import warnings

STAMP = ".kit-stamp"
DSA = "sglang/srt/layers/attention/dsa_backend.py"
UNGUARDED = "if is_cuda():\n    import deep_gemm\n"
GUARDED = "if is_cuda():\n    try:\n        import deep_gemm\n    except ImportError:\n        deep_gemm = None\n"


def stamp_of(tarball: str) -> str:
    h = hashlib.sha256()
    with open(tarball, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack(tarball: str, target: str, stamp: str) -> str:
    stamp_path = os.path.join(target, STAMP)
    if os.path.isfile(stamp_path) and open(stamp_path).read().strip() == stamp:
        return "already there"
    if os.path.exists(target):
        shutil.rmtree(target)  # another kit, or an unpack that did not finish
    tmp = target.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if shutil.which("tar") and shutil.which("xz"):
        subprocess.run(["tar", "-xJf", os.path.abspath(tarball), "-C", tmp], check=True)
    else:
        with tarfile.open(tarball) as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(tmp, filter="data")
            else:
                tf.extractall(tmp)
    with open(os.path.join(tmp, STAMP), "w") as fh:
        fh.write(stamp + "\n")
    os.rename(tmp, target)
    return "unpacked"


def guard_deep_gemm(target: str) -> str:
    path = os.path.join(target, DSA)
    if not os.path.isfile(path):
        return f"{DSA} not in the overlay, nothing to do"
    src = open(path).read()
    if "deep_gemm = None" in src:
        return "already guarded"
    if UNGUARDED not in src:
        return "WARNING: the unguarded import was not found; file left as it is"
    with open(path, "w") as fh:
        fh.write(src.replace(UNGUARDED, GUARDED, 1))
    return "guarded"


def ipython_standin(target: str) -> str:
    """Complete an older kit's IPython stand-in: Ray's logging calls ``get_ipython`` once sglang
    has imported it, and matplotlib reads ``version_info`` when it makes a figure."""
    path = os.path.join(target, "IPython", "__init__.py")
    if not os.path.isfile(path):
        return "no IPython stand-in"
    src = open(path).read()
    added = []
    if "get_ipython" not in src:
        added.append("\n\ndef get_ipython():\n    return None\n")
    if "version_info" not in src:
        added.append('\nversion_info = (8, 24, 0, "final", 0)\n')
    if not added:
        return "complete"
    with open(path, "a") as fh:
        fh.write("".join(added))
    return f"completed ({len(added)} name(s) added)"


def byte_compile(target: str) -> str:
    # compileall skips sources whose .pyc is current, so a second run only checks timestamps.
    # Some files (test data, Python-2 era snippets) do not compile; that is tolerated.
    # Old string escapes in a few files would print SyntaxWarnings; they are the packages' business.
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    os.environ["PYTHONWARNINGS"] = "ignore::SyntaxWarning"  # for workers that do not fork
    ok = compileall.compile_dir(target, quiet=2, workers=0, legacy=False)
    return "compiled" if ok else "compiled (some files did not compile; tolerated)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="unpack and prepare the GPU kit overlay")
    ap.add_argument("tarball")
    ap.add_argument("--target", default="/tmp/site")
    ap.add_argument("--no-compile", action="store_true", help="skip byte-compiling")
    a = ap.parse_args(argv)
    total = time.monotonic()

    t = time.monotonic()
    stamp = stamp_of(a.tarball)
    what = unpack(a.tarball, a.target, stamp)
    print(f"prepare_kit: unpack     {time.monotonic() - t:6.1f} s  {what} ({a.target})", flush=True)

    t = time.monotonic()
    what = guard_deep_gemm(a.target)
    print(f"prepare_kit: deep_gemm  {time.monotonic() - t:6.1f} s  {what}", flush=True)
    print(f"prepare_kit: IPython    {ipython_standin(a.target)}", flush=True)

    if not a.no_compile:
        t = time.monotonic()
        what = byte_compile(a.target)
        print(f"prepare_kit: compileall {time.monotonic() - t:6.1f} s  {what}", flush=True)

    print(f"prepare_kit: ready in {time.monotonic() - total:.1f} s; export PYTHONPATH={a.target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
