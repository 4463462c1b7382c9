#!/usr/bin/env bash
# Regression guard, under 2 minutes: shou against the plain-httpx floor (and the raw SDK) on the peers'
# zero-latency mock, in the harness's quick mode (~40 s). Fails if shou's sequential async task costs more
# than MAX_RATIO (default 1.0) times a hand-written loop on the official openai SDK ("raw") measured in the
# same run: a ratio within one run survives this noisy machine; absolute times do not.
# Run it before stopping:  bash bench/quick.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
HARNESS="${PEER_HARNESS:-$HERE/../../shared/bench/peers}"
export PEER_BENCH_HOME="${PEER_BENCH_HOME:-$HOME/.cache/peer-bench}"
export PEER_BENCH_PIP="-e $HERE/.." PYTHONPATH="$HERE" PEER_BENCH_EXTRA="shou=shou_runner" PEER_BENCH_EXTRA_PACKAGES=shou
QUICK=1 "$HARNESS/run_all.sh" --frameworks floor,raw,shou --rounds 2 --conc-rounds 1 --inst-rounds 1 | tee /tmp/shou-quick.txt
python3 - "${MAX_RATIO:-1.0}" <<'PY'
import json, os, statistics, sys
r = json.load(open(os.path.join(os.environ["PEER_BENCH_HOME"], "results", "results.json")))
def med(fw):
    return statistics.median(r["frameworks"][fw]["seq"]["async"])
ratio = med("shou") / med("raw")
print(f"shou / floor, sequential async: {med('shou') / med('floor'):.2f}x")
print(f"shou / raw openai SDK loop, sequential async: {ratio:.2f}x (limit {sys.argv[1]}x)")
sys.exit(0 if ratio <= float(sys.argv[1]) else 1)
PY
