#!/usr/bin/env bash
# Instructions per task of the peers' 3-turn task (deterministic, unlike times on a shared machine): callgrind
# on the interpreter, a run of 120 tasks minus a run of 20, over 100, so start-up and imports cancel out.
#   bench/instructions.sh                    # this tree, store and trace on (bench/shou_runner.py)
#   SHOU_BENCH_STORE=0 bench/instructions.sh # the store off
#   bench/instructions.sh /path/to/other/checkout   # another tree's src/ and bench/ (e.g. a git worktree)
# Needs valgrind and the peers' mock on PORT (default 18735):
#   python ../shared/bench/peers/mock_server.py --port 18735 &
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
TREE="$(cd "${1:-$REPO}" && pwd)"
export PEERS="${PEERS:-$(cd "$REPO/.." && pwd)/shared/bench/peers}"
[ -d "$PEERS/runners" ] || PEERS=/work/shared/bench/peers
PORT="${PORT:-18735}"
PY="$(python -c 'import sys; print(sys.executable)')"  # the interpreter itself: a pyenv shim is a shell script
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
count() {
  PYTHONPATH="$TREE/src" valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" \
    "$PY" "$TREE/bench/task_profile.py" --port "$PORT" --fw shou -n "$1" 2>&1 | awk '/Collected/ {print $4}'
}
a="$(count 20)"
b="$(count 120)"
echo "$TREE: $(( (b - a) / 100 )) instructions per task"
