#!/usr/bin/env bash
# Issue 30's acceptance measurement in one command: shou before the change (50e96f5) and shou of this tree,
# both against the raw aiohttp loop `floor-aio` (and the httpx `floor`), in ONE run of the peers' harness.
#   bench/peers_before_after.sh                 # full harness mode, more rounds (~3 min)
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
# Twice the harness's sequential rounds and 7 concurrent rounds instead of 3: with four rows a full run is
# ~2-3 min on 2 cores, and the per-round ratios below need enough rounds for their spread to mean something.
# Options given to this script come later on the command line and win.
MORE=()
[ "${QUICK:-0}" = "1" ] || MORE=(--rounds 20 --conc-rounds 7)
QUICK="${QUICK:-0}" "$PEERS/run_all.sh" --frameworks floor,floor-aio "${MORE[@]}" "$@"

# The `shou` row's worker runs this same interpreter and environment, so this is where it imported shou
# from (run_all.sh has just re-run the editable install of $REPO).
after_file="$("$PY" -c 'import shou; print(shou.__file__)')"
case "$after_file" in
  "$REPO/src/"*) ;;
  *) echo "the shou row imported $after_file, not $REPO/src" >&2; exit 1 ;;
esac
grep -h '^shou-before: shou from' "$OUT/logs/worker-shou-before.log" || true
echo "shou: shou from $after_file (tree at $(git -C "$REPO" rev-parse --short HEAD))"

"$PY" - "$OUT/results.json" <<'EOF'
import json
import statistics as st
import sys

R = json.load(open(sys.argv[1]))
S, F, failed = R["summary"], R["frameworks"], R.get("failed") or {}
if failed:
    sys.exit(f"rows failed: {failed}")
k = R["meta"]["args"]["seq_chunk"]
BASE = "floor-aio"


def q(xs, p):
    xs = sorted(xs)
    i = (len(xs) - 1) * p
    lo = int(i)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (i - lo)


def rounds(fw, what):
    # one ratio per round: the rows of a round ran back to back (order reshuffled), so a ratio within a round
    # cancels most of the drift of a shared machine; the spread of these ratios is the noise to judge by
    if what == "conc":
        return [a["tasks_per_s"] / b["tasks_per_s"] for a, b in zip(F[fw]["conc"], F[BASE]["conc"])]
    xs, bs = F[fw]["seq"][what], F[BASE]["seq"][what]
    return [st.median(xs[i:i + k]) / st.median(bs[i:i + k]) for i in range(0, min(len(xs), len(bs)), k)]


cols = (("async", "seq async x time"), ("sync", "seq sync x time"), ("conc", "conc-50 x t/s"))
print(f"\nrelative to {BASE}: ratio of the medians [p25-p75 of the per-round ratios]"
      " (time: lower is better; throughput: higher is better)")
print(f"{'row':<12} | " + " | ".join(f"{h:>20}" for _, h in cols))
out = {}
for fw in ("floor", "shou-before", "shou"):
    if fw not in S:
        continue
    med = (S[fw]["seq_async_median_ms"] / S[BASE]["seq_async_median_ms"],
           S[fw]["seq_sync_median_ms"] / S[BASE]["seq_sync_median_ms"],
           S[fw]["conc_tasks_per_s_median"] / S[BASE]["conc_tasks_per_s_median"])
    rr = [rounds(fw, w) for w, _ in cols]
    out[fw] = (med, rr)
    print(f"{fw:<12} | " + " | ".join(f"{m:5.2f} [{q(r, .25):4.2f}-{q(r, .75):4.2f}]".rjust(20)
                                      for m, r in zip(med, rr)))
(b, brr), (n, nrr) = out["shou-before"], out["shou"]
print(f"shou / shou-before: seq async {n[0] / b[0]:.2f}x time, seq sync {n[1] / b[1]:.2f}x time, "
      f"conc-50 {n[2] / b[2]:.2f}x throughput")
print("conc-50 rounds t/s:", "; ".join(f"{fw} {'/'.join(f'{x:.0f}' for x in S[fw]['conc_tasks_per_s_all'])}"
                                      for fw in (BASE, "shou-before", "shou")))
print("loadavg (1/5/15 min) per phase:",
      "; ".join(f"{p} {a[0]:.1f}/{a[1]:.1f}/{a[2]:.1f}" for p, a in R["meta"]["loadavg"]))
# worse: shou's median per-round ratio beyond shou-before's inter-quartile range, on the bad side
worse = [h for i, (w, h) in enumerate(cols)
         if (st.median(nrr[i]) > q(brr[i], .75) if w != "conc" else st.median(nrr[i]) < q(brr[i], .25))]
print("no worse than before beyond the rounds' spread" if not worse
      else f"worse than before beyond the rounds' spread on: {', '.join(worse)}")
EOF
