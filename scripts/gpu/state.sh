#!/usr/bin/env bash
# The GPU plan's state, carried from one remote GPU host to the next (the host may be released 30 s
# after a call, so the next call may find a fresh one). Run from the repo root, whose mlruns/ is the
# plan's store.
#   bash scripts/gpu/state.sh snapshot RES OUT    consistent copy into OUT: results.tar.gz (RES with a
#                                                 sqlite backup of mlruns/mlflow.db), mlruns.tar.gz, plan.log
#   bash scripts/gpu/state.sh restore RES STATE   on a fresh host: RES and mlruns/ back from a snapshot
#                                                 in STATE (.tar.gz or .tar.xz), marked so the plan
#                                                 resumes (RES/resumed)
set -uo pipefail
cmd=$1 RES=$2 DIR=$3
case "$cmd" in
  snapshot)
    mkdir -p "$DIR"
    # sqlite's backup API gives a consistent copy of a store that a running search is writing.
    python3 - "$RES" <<'PY' >/dev/null 2>&1
import sqlite3, sys, pathlib
res = pathlib.Path(sys.argv[1]); src = pathlib.Path("mlruns/mlflow.db")
if src.exists():
    dst = sqlite3.connect(res / "mlflow.db"); sqlite3.connect(src).backup(dst); dst.close()
PY
    tar -czf "$DIR/results.tar.gz.part" --exclude='*.tmp' -C "$RES" . 2>/dev/null
    mv "$DIR/results.tar.gz.part" "$DIR/results.tar.gz"
    tar -czf "$DIR/mlruns.tar.gz.part" --exclude='mlflow.db' --exclude='*/checkpoint_*' mlruns 2>/dev/null
    mv "$DIR/mlruns.tar.gz.part" "$DIR/mlruns.tar.gz"
    cp "$RES/plan.log" "$DIR/plan.log" 2>/dev/null
    true
    ;;
  restore)
    # gzip as a call brings them back, or xz as they are committed (a third of the size, which the
    # 64 MiB a call carries needs); Python's tarfile reads both, the host may lack the xz tool.
    ext=""; for e in tar.gz tar.xz; do [ -f "$DIR/results.$e" ] && [ -f "$DIR/mlruns.$e" ] && { ext=$e; break; }; done
    [ -n "$ext" ] || {
      echo "state.sh restore: $DIR has no results.tar.gz and mlruns.tar.gz (the files of an earlier call; .tar.xz also read)" >&2; exit 2; }
    if [ -e "$RES/started" ]; then
      echo "state.sh restore: $RES already holds a started plan; restore only onto a fresh host" >&2; exit 2
    fi
    mkdir -p "$RES" && python3 - "$DIR/results.$ext" "$RES" "$DIR/mlruns.$ext" . <<'PY' || exit 1
import sys, tarfile
for archive, dest in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="fully_trusted")
PY
    [ -f "$RES/mlflow.db" ] && cp "$RES/mlflow.db" mlruns/mlflow.db
    # The earlier host's markers: this one starts the plan itself, which then skips what is done.
    rm -f "$RES/started" "$RES/plan.pid" "$RES/plan.done"
    n=$(( $(cat "$RES/resumed" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$RES/resumed"
    for f in plan.log facts.txt prepare.log; do [ -f "$RES/$f" ] && mv "$RES/$f" "$RES/${f%.*}.before-$n.${f##*.}"; done
    echo "state.sh restore: resumed from $DIR (restore $n)"
    ;;
  *) echo "usage: state.sh snapshot|restore RES DIR" >&2; exit 2 ;;
esac
