"""Memory retrieval on LoCoMo: recall@k of `MemoryStore.search` over conversation turns.

    python bench/locomo_bench.py                      # BM25-only and hybrid, the five dev conversations
    python bench/locomo_bench.py --mode hybrid --set w_dense=0.5,neighbour_weight=0.2
    python bench/locomo_bench.py --layout bare        # turns as bare texts: no session, no time, no date

With `--layout bare` the turns are stored as a user importing plain notes would: the speaker and text only,
no session, all at the moment of import (memory/index.py then chains them as one episode per source).

Every turn of a conversation becomes a memory "(<session date>) <speaker>: <text>" (with the image
caption, when the turn shared one), its id the turn's dia_id and its session the conversation's session,
in a fresh store per conversation. Each question is searched as is; recall@k is the share of its
evidence turns among the top k, averaged per category and overall. The data is read from
shared/bench/locomo (see its README); nothing of it is copied into the repository.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from shou.memory import MemoryStore, NewMemory, RankParams

DATA = Path(os.environ.get("LOCOMO_DIR", Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo"))
KS = (1, 5, 10, 25)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE_RE = re.compile(r"D:?(\d+):0*(\d+)")


def session_time(text: str) -> float:
    """'1:56 pm on 8 May, 2023' as a timestamp (0 when it cannot be read)."""
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt).timestamp()
        except ValueError:
            continue
    return 0.0


def turns(conv: dict[str, Any], name: str, layout: str = "sessions") -> list[NewMemory]:
    """The conversation's turns as memories, in order (see the module docstring for `layout`)."""
    out: list[NewMemory] = []
    n = 1
    while f"session_{n}" in conv:
        date = conv.get(f"session_{n}_date_time", "")
        start = session_time(date)
        for i, turn in enumerate(conv[f"session_{n}"]):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares an image: {turn['blip_caption']}]"
            if layout == "bare":
                out.append(NewMemory(text, id=turn["dia_id"], source="locomo"))
                continue
            # One second apart keeps the turns of a session in order.
            out.append(NewMemory(f"({date}) {text}", id=turn["dia_id"], time=start + i, session=f"{name}:{n}",
                                 source="locomo"))
        n += 1
    return out


def evidence(raw: list[str], known: set[str]) -> list[str]:
    """Normalised evidence ids ('D8:6; D9:17', 'D:11:26', 'D30:05' included) that name a real turn."""
    ids: list[str] = []
    for item in raw:
        for s, t in _EVIDENCE_RE.findall(item):
            dia = f"D{int(s)}:{int(t)}"
            if dia in known and dia not in ids:
                ids.append(dia)
    return ids


def run(mode: str, params: RankParams, files: list[Path], layout: str = "sessions") -> dict[str, Any]:
    """Index and query every conversation; per-category recall sums, counts, timings."""
    hits: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(KS))
    counts: dict[str, int] = defaultdict(int)
    latencies: list[float] = []
    index_s = 0.0
    n_turns = n_stored = 0
    with tempfile.TemporaryDirectory() as tmp:
        for file in files:
            conv_all = json.loads(file.read_text())
            conv = conv_all.get("conversation", conv_all)
            qa = conv_all.get("qa", conv.get("qa", []))
            items = turns(conv, file.stem, layout)
            store = MemoryStore(Path(tmp) / f"{mode}-{file.stem}.db", embeddings=(mode == "hybrid"), params=params)
            t0 = time.perf_counter()
            store.add_many(items)
            index_s += time.perf_counter() - t0
            n_turns += len(items)
            n_stored += store.count()
            known = {i.id for i in items if i.id}
            store.search("warm up", 1)  # the first query loads the model; not a user-visible cost per query
            for q in qa:
                wanted = evidence(q.get("evidence", []), known)
                if not wanted:
                    continue
                t0 = time.perf_counter()
                found = [m.id for m in store.search(str(q["question"]), max(KS))]
                latencies.append(time.perf_counter() - t0)
                cat = CATEGORIES.get(q["category"], str(q["category"]))
                for key in (cat, "overall"):
                    counts[key] += 1
                    for j, k in enumerate(KS):
                        hits[key][j] += len(set(found[:k]) & set(wanted)) / len(wanted)
            store.close()
    return {"hits": hits, "counts": counts, "latency_ms": 1000 * statistics.median(latencies),
            "index_s": index_s, "turns": n_turns, "stored": n_stored}


def table(results: dict[str, dict[str, Any]]) -> str:
    """One Markdown row per mode and category."""
    lines = ["| mode | category | questions | R@1 | R@5 | R@10 | R@25 | index (s) | query median (ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        for cat in [*CATEGORIES.values(), "overall"]:
            n = r["counts"].get(cat, 0)
            if not n:
                continue
            recall = " | ".join(f"{h / n:.3f}" for h in r["hits"][cat])
            timing = f"{r['index_s']:.1f} | {r['latency_ms']:.1f}" if cat == "overall" else " | "
            name = f"**{cat}**" if cat == "overall" else cat
            lines.append(f"| {mode} | {name} | {n} | {recall} | {timing} |")
    return "\n".join(lines)


def main() -> None:
    """Parse the flags, run each mode, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA, help="folder of LoCoMo conversation JSON files")
    ap.add_argument("--mode", choices=["bm25", "hybrid", "both"], default="both")
    ap.add_argument("--layout", choices=["sessions", "bare"], default="sessions",
                    help="turns with their session and time, or as bare texts")
    ap.add_argument("--set", default="", help="ranking weights to try, e.g. w_dense=0.5,neighbour_weight=0.2")
    args = ap.parse_args()
    files = sorted(args.data.glob("*.json"))
    if not files:
        sys.exit(f"no conversations in {args.data} (set --data or LOCOMO_DIR)")
    pairs = (kv.split("=") for kv in args.set.split(",") if kv)
    ints = ("candidates", "neighbour_window", "hop_seeds", "token_candidates")
    params = dataclasses.replace(RankParams(), **{k: int(v) if k in ints else float(v) for k, v in pairs})
    modes = ["bm25", "hybrid"] if args.mode == "both" else [args.mode]
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = {m: run(m, params, files, args.layout) for m in modes}
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    stored = ", ".join(f"{r['stored']} stored ({m})" for m, r in results.items())
    print(f"{len(files)} conversations ({args.layout}), {next(iter(results.values()))['turns']} turns, {stored}; "
          f"{os.cpu_count()} cores, load average {load_before} before, {load_after} after; {params}\n")
    print(table(results))


if __name__ == "__main__":
    main()
