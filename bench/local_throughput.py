"""Tokens per second of shou's local provider against raw llama-cpp-python: same model, prompt, settings.

Interleaves N rounds of: raw `Llama.create_chat_completion(stream=True)`, then `LocalModel.stream()`
(no tools), both greedy with the same seed and token cap, on one loaded model, one thread. Reports the
median generated tokens per second of each and their ratio (goal: shou >= 0.95x raw).

    python bench/local_throughput.py [N]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

from shou.messages import Message
from shou.models.base import TextChunk
from shou.models.local import LocalModel

PROMPT = "Explain in a few sentences why the sky is blue."
MAX_TOKENS = 128


def raw_run(llama: object) -> tuple[int, float]:
    t0 = time.perf_counter()
    pieces = []
    for chunk in llama.create_chat_completion(  # type: ignore[attr-defined]
        messages=[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": PROMPT}],
        stream=True, max_tokens=MAX_TOKENS, temperature=0.0, seed=1,
    ):
        piece = chunk["choices"][0].get("delta", {}).get("content")
        if piece:
            pieces.append(piece)
    elapsed = time.perf_counter() - t0
    return len(llama.tokenize("".join(pieces).encode(), add_bos=False)), elapsed  # type: ignore[attr-defined]


async def shou_run(model: LocalModel) -> tuple[int, float]:
    t0 = time.perf_counter()
    pieces = [e.text async for e in model.stream(
        [Message.system("You are a helpful assistant."), Message.user(PROMPT)], []) if isinstance(e, TextChunk)]
    elapsed = time.perf_counter() - t0
    return len(model.llama().tokenize("".join(pieces).encode(), add_bos=False)), elapsed


async def main(n: int) -> None:
    model = LocalModel(seed=1, temperature=0.0, max_tokens=MAX_TOKENS)
    llama = model.llama()
    raw_run(llama)  # warm-up: page in the weights
    raw, ours = [], []
    for _ in range(n):
        tokens, secs = raw_run(llama)
        raw.append(tokens / secs)
        tokens, secs = await shou_run(model)
        ours.append(tokens / secs)
    r, s = statistics.median(raw), statistics.median(ours)
    load = os.getloadavg()
    print(f"SmolLM2-135M Q4_1, 1 thread, {MAX_TOKENS} tokens max, greedy; N={n}; load average {load[0]:.2f}\n")
    print("| path | tokens/s (median, incl. prompt processing) | ratio |")
    print("|---|---|---|")
    print(f"| raw llama-cpp-python `create_chat_completion(stream=True)` | {r:.1f} | 1.00 |")
    print(f"| shou `LocalModel.stream()` | {s:.1f} | {s / r:.2f} |")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
