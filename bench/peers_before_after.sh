#!/usr/bin/env bash
# Issue 30's acceptance measurement in one command: shou before the change (50e96f5) and shou of this tree,
# both against the raw aiohttp loop `floor-aio` (and the httpx `floor`), in ONE run of the peers' harness.
#   bench/peers_before_after.sh                 # full harness mode
#   QUICK=1 bench/peers_before_after.sh         # the harness's smoke mode (fewer rounds)
#   bench/peers_before_after.sh --skip-idle     # any bench.py option passes through
# Env: PEERS (the harness, default ../shared/bench/peers next to the repo), SHOU_BEFORE_SRC (src/ of a
# checkout of 50e96f5; made as a git worktree outside the repo if missing), PEER_BENCH_HOME.
# Prints shou and shou-before relative to floor-aio: sequential time ratios (async, sync) and the
# 50-concurrent throughput ratio, from results.json, and whether shou is no worse than before.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BEFORE_COMMIT=50e96f5
PEERS="${PEERS:-$(cd "$REPO/.." && pwd)/shared/bench/peers}"
[ -x "$PEERS/run_all.sh" ] || PEERS=/work/shared/bench/peers
export PEER_BENCH_HOME="${PEER_BENCH_HOME:-$HOME/.cache/peer-bench}"
export SHOU_BEFORE_SRC="${SHOU_BEFORE_SRC:-$(dirname "$REPO")/shou-$BEFORE_COMMIT/src}"

if [ ! -f "$SHOU_BEFORE_SRC/shou/__init__.py" ]; then
  git -C "$REPO" worktree add --detach "$(dirname "$SHOU_BEFORE_SRC")" "$BEFORE_COMMIT"
fi
got="$(git -C "$SHOU_BEFORE_SRC" rev-parse --short=7 HEAD)"
[ "$got" = "$BEFORE_COMMIT" ] || { echo "SHOU_BEFORE_SRC is at $got, not $BEFORE_COMMIT" >&2; exit 1; }

# Only the packages these four rows import (the harness's own requirements.txt installs every peer
# framework, minutes of pip for rows this command does not run); pinned as the harness pins them.
# httpx2 was a core dependency of shou at 50e96f5.
PY="$PEER_BENCH_HOME/.venv/bin/python"
if [ ! -x "$PY" ]; then
  mkdir -p "$PEER_BENCH_HOME"
  python3 -m venv "$PEER_BENCH_HOME/.venv"
  "$PY" -m pip install -q -c "$PEERS/requirements.lock" httpx aiohttp psutil httpx2
fi
export PEER_BENCH_PIP="-e $REPO"
export PYTHONPATH="$REPO/bench${PYTHONPATH:+:$PYTHONPATH}"
export PEER_BENCH_EXTRA="shou-before=shou_before_runner,shou=shou_runner" PEER_BENCH_EXTRA_PACKAGES=shou

OUT="$PEER_BENCH_HOME/results"
QUICK="${QUICK:-0}" "$PEERS/run_all.sh" --frameworks floor,floor-aio "$@"

# The `shou` row's worker runs this same interpreter and environment, so this is where it imported shou
# from (run_all.sh has just re-run the editable install of $REPO).
after_file="$("$PY" -c 'import shou; print(shou.__file__)')"
case "$after_file" in
  "$REPO/src/"*) ;;
  *) echo "the shou row imported $after_file, not $REPO/src" >&2; exit 1 ;;
esac
grep -h '^shou-before: shou from' "$OUT/logs/worker-shou-before.log" || true
echo "shou: shou from $after_file (main at $(git -C "$REPO" rev-parse --short HEAD))"

"$PY" - "$OUT/results.json" <<'EOF'
import json
import sys

R = json.load(open(sys.argv[1]))
S, failed = R["summary"], R.get("failed") or {}
if failed:
    sys.exit(f"rows failed: {failed}")
base = S["floor-aio"]


def ratios(s):
    return (s["seq_async_median_ms"] / base["seq_async_median_ms"],
            s["seq_sync_median_ms"] / base["seq_sync_median_ms"],
            s["conc_tasks_per_s_median"] / base["conc_tasks_per_s_median"])


print("\nrelative to floor-aio (time: lower is better; throughput: higher is better)")
print(f"{'row':<12} | {'seq async x time':>16} | {'seq sync x time':>15} | {'conc-50 x t/s':>13}")
rows = {fw: ratios(S[fw]) for fw in ("floor", "shou-before", "shou") if fw in S}
for fw, (a, s, c) in rows.items():
    print(f"{fw:<12} | {a:16.2f} | {s:15.2f} | {c:13.2f}")
b, n = rows["shou-before"], rows["shou"]
print(f"shou / shou-before: seq async {n[0] / b[0]:.2f}x time, seq sync {n[1] / b[1]:.2f}x time, "
      f"conc-50 {n[2] / b[2]:.2f}x throughput")
print("conc-50 rounds t/s:", "; ".join(f"{fw} {'/'.join(f'{x:.0f}' for x in S[fw]['conc_tasks_per_s_all'])}"
                                      for fw in ("floor-aio", "shou-before", "shou")))
print("loadavg (1/5/15 min) per phase:",
      "; ".join(f"{p} {a[0]:.1f}/{a[1]:.1f}/{a[2]:.1f}" for p, a in R["meta"]["loadavg"]))
worse = [k for k, i, sign in (("seq async", 0, 1), ("seq sync", 1, 1), ("conc-50", 2, -1))
         if sign * (n[i] - b[i]) > 0]
print("no worse than before on every figure" if not worse else f"worse than before on: {', '.join(worse)} "
      "(compare with the spread of the rounds and the load average before concluding)")
EOF
