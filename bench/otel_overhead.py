"""What OpenTelemetry export (`shou.observe.otel.OtelObserver`) adds to a model call.

An Agent runs against the scripted model over loopback HTTP (streaming, as shou talks to providers), the
session store on, N runs of K steps each (a step is one model call and one calculator call; a run ends
with one answering call: K+1 model calls). Runs rotate between OTel off, on, and on with content, so machine
noise hits all alike. The scripted server and the OTLP/HTTP collector (tests/fixtures/otlp_collector.py,
which decodes every request) run in their own processes, so only the agent and the exporter's thread share
the measured process's GIL. Then the events of one run are replayed through an observer on their own, to
time what the observer itself costs the loop (the export happens on the SDK's thread).

    python bench/otel_overhead.py [--runs N] [--steps K]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shou import Agent, SQLiteStore
from shou.events import Event, ModelRequest, RunStarted
from shou.models.openai_compat import OpenAICompatible
from shou.observe.otel import OtelObserver
from shou.tools.builtin.calc import calculator

MODES = ("off", "on", "on+content")
ROOT = Path(__file__).resolve().parent.parent  # where `tests.fixtures.otlp_collector` imports from
# The scripted server writes the headers and the body in separate sends; with Nagle's algorithm on, the
# client's delayed ACK holds the body ~40 ms, a floor that would hide a cost of microseconds.
SERVE = ("import sys; import shou.models.scripted_server as s; s._Handler.disable_nagle_algorithm = True; "
         "s.main(sys.argv[1:])")


def script(runs: int, steps: int) -> list[dict]:
    """`runs` runs of `steps` calculator calls (each different: the repeat guard stays quiet) and an answer."""
    turns: list[dict] = []
    for r in range(runs):
        for i in range(steps):
            turns.append({"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{r} * {i} + 1"}}],
                          "usage": {"prompt_tokens": 100 + i, "completion_tokens": 20}})
        turns.append({"text": "done", "usage": {"prompt_tokens": 150, "completion_tokens": 5}})
    return turns


class Child:
    """A helper process that prints its address first: the scripted server or the collector."""

    def __init__(self, argv: list[str], *, stops_at_eof: bool) -> None:
        self.stops_at_eof = stops_at_eof
        self.proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.address = self.stdout.readline().strip().removeprefix("listening on ")

    def spans(self) -> int:
        """The collector's count of spans received."""
        self.stdin.write("count\n")
        self.stdin.flush()
        return int(self.stdout.readline())

    def close(self) -> None:
        self.stdin.close()
        if not self.stops_at_eof:
            self.proc.terminate()
        self.proc.wait(10)


def replay_cost(events: list[Event], endpoint: str, repeats: int) -> tuple[float, float]:
    """Median µs per step the observer spends on the loop, replaying one run's events (fresh run ids),
    content off and on."""
    steps = max(1, sum(1 for e in events if isinstance(e, ModelRequest)))
    out = []
    for content in (False, True):
        observer = OtelObserver(endpoint=endpoint, content=content)
        times = []
        for n in range(repeats):
            batch = [dataclasses.replace(e, run_id=f"replay_{content}_{n}") for e in events]
            t0 = time.perf_counter_ns()
            for event in batch:
                observer(event)
            times.append((time.perf_counter_ns() - t0) / 1000 / steps)
            if n % 20 == 19:  # keep the export queue short (it drops spans past 2048), outside the timing
                observer.force_flush(30)
        observer.force_flush(30)
        observer.shutdown()
        out.append(statistics.median(times))
    return out[0], out[1]


def encode_cost(events: list[Event], repeats: int) -> float:
    """µs per span the exporter spends encoding spans to OTLP protobuf, on its own thread."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    observer = OtelObserver(tracer_provider=provider)
    for n in range(repeats):
        for event in events:
            observer(dataclasses.replace(event, run_id=f"encode_{n}"))
    spans = memory.get_finished_spans()
    t0 = time.perf_counter_ns()
    encode_spans(spans).SerializePartialToString()
    return (time.perf_counter_ns() - t0) / 1000 / len(spans)


async def main(runs: int, steps: int) -> None:
    calls = steps + 1
    collector = Child(["-m", "tests.fixtures.otlp_collector"], stops_at_eof=True)
    with tempfile.TemporaryDirectory() as tmp:
        script_file = Path(tmp) / "script.json"
        script_file.write_text(json.dumps(script(runs * len(MODES) + len(MODES), steps)))
        server = Child(["-c", SERVE, "--script", str(script_file), "--port", "0"], stops_at_eof=False)
        store = SQLiteStore(Path(tmp) / "s.db")
        observers = {"on": OtelObserver(endpoint=collector.address),
                     "on+content": OtelObserver(endpoint=collector.address, content=True)}
        agents = {mode: Agent(OpenAICompatible("scripted", base_url=server.address, api_key="k", provider="openai"),
                              [calculator], workspace=tmp, store=store, max_steps=calls,
                              observers=[observers[mode]] if mode in observers else [])
                  for mode in MODES}
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        first_on = ""
        for n in range(runs + 1):  # round 0 warms up (imports, connections, page cache)
            for mode in MODES[n % len(MODES):] + MODES[:n % len(MODES)]:
                t0 = time.perf_counter()
                result = await agents[mode].arun("count", f"{mode}-{n}")
                elapsed = time.perf_counter() - t0
                assert result.status == "completed" and result.steps == calls, result
                if n:
                    times[mode].append(elapsed / calls * 1e6)
                    first_on = first_on or (result.session if mode == "on" else "")
        flushed = all(o.force_flush(30) for o in observers.values())
        expected, got = (runs + 1) * (1 + calls + steps) * len(observers), collector.spans()
        events = list(store.events(first_on))
        assert isinstance(events[0], RunStarted)
        sync_off, sync_on = replay_cost(events, collector.address, 200)
        encoding = encode_cost(events, 50)
        for o in observers.values():
            o.shutdown()
        store.close()
        server.close()
    collector.close()

    med = {mode: statistics.median(v) for mode, v in times.items()}
    # Runs of one round are adjacent in time: their differences cancel the drift of the machine's load.
    paired = {mode: statistics.median(a - b for a, b in zip(times[mode], times["off"], strict=True))
              for mode in MODES}
    load = os.getloadavg()
    print(f"{runs} runs per mode of {steps} steps ({calls} model calls, {steps} calculator calls), streaming, "
          f"store on, modes interleaved; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"spans received {got}/{expected} (flushed: {flushed})\n")
    print("| OTel | median per model call (µs) | added (µs, median of paired differences) | ratio |")
    print("|---|---|---|---|")
    for mode in MODES:
        added = "" if mode == "off" else f"{paired[mode]:+.0f}"
        print(f"| {mode} | {med[mode]:.0f} | {added} | {med[mode] / med['off']:.3f}x |")
    print(f"\nThe observer's own time on the loop, per step (the events of one run replayed 200 times, median): "
          f"{sync_off:.0f} µs without content, {sync_on:.0f} µs with content. Encoding to OTLP protobuf, on the "
          f"exporter's thread: {encoding:.0f} µs per span ({2 * encoding:.0f} µs per step: a chat and a tool span).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="measured runs per mode (default 30)")
    parser.add_argument("--steps", type=int, default=20, help="calculator calls per run (default 20)")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.steps))
