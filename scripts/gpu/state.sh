#!/usr/bin/env bash
# The GPU plan's state, carried from one lent machine to the next (a machine goes back 30 s after a
# call; the next call may find a bare one). Run from the repo root, whose mlruns/ is the plan's store.
#   bash scripts/gpu/state.sh snapshot RES OUT    consistent copy into OUT: results.tar.gz (RES with a
#                                                 sqlite backup of mlruns/mlflow.db), mlruns.tar.gz, plan.log
#   bash scripts/gpu/state.sh restore RES STATE   on a bare machine: RES and mlruns/ back from a snapshot
#                                                 in STATE, marked so the plan resumes (RES/resumed)
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
    [ -f "$DIR/results.tar.gz" ] && [ -f "$DIR/mlruns.tar.gz" ] || {
      echo "state.sh restore: $DIR has no results.tar.gz and mlruns.tar.gz (the files of an earlier call)" >&2; exit 2; }
    if [ -e "$RES/started" ]; then
      echo "state.sh restore: $RES already holds a started plan; restore only onto a bare machine" >&2; exit 2
    fi
    mkdir -p "$RES" && tar -xzf "$DIR/results.tar.gz" -C "$RES" && tar -xzf "$DIR/mlruns.tar.gz" || exit 1
    [ -f "$RES/mlflow.db" ] && cp "$RES/mlflow.db" mlruns/mlflow.db
    # The earlier machine's markers: this one starts the plan itself, which then skips what is done.
    rm -f "$RES/started" "$RES/plan.pid" "$RES/plan.done"
    n=$(( $(cat "$RES/resumed" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$RES/resumed"
    for f in plan.log facts.txt prepare.log; do [ -f "$RES/$f" ] && mv "$RES/$f" "$RES/${f%.*}.before-$n.${f##*.}"; done
    echo "state.sh restore: resumed from $DIR (restore $n)"
    ;;
  *) echo "usage: state.sh snapshot|restore RES DIR" >&2; exit 2 ;;
esac
