"""A known secret the model streams split across fragments is replaced like a whole one: in the `--json`
deltas, the stored events and the response cache (and so in what a cache hit replays)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

SECRET = "stream-Secret-5xQ9wL2kPq"  # 24 characters: split by 7-character fragments into 4 or 5


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _cached_texts(tmp_path: Path) -> list[str]:
    """Every stored reply's fragments, each run of them joined, as a replay would show them."""
    db = sqlite3.connect(tmp_path / ".cache" / "shou" / "responses.db")
    try:
        values = [json.loads(v) for (v,) in db.execute("SELECT value FROM responses")]
    finally:
        db.close()
    texts = []
    for value in values:
        texts.append("".join(c[1] for c in value["chunks"] if c[0] == "text"))
        texts.append("".join(c[3] for c in value["chunks"] if c[0] == "call"))
        texts.append(json.dumps(value))
    return texts


def test_a_secret_split_across_stream_fragments_is_redacted(serve, shou, tmp_path: Path, workspace: Path) -> None:
    turns = [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7", "note": f"key {SECRET} here"}}],
         "chunk_size": 7},
        {"text": f"The key is {SECRET}, and again: {SECRET}.", "chunk_size": 7},
    ]
    srv = serve(turns * 2)
    runs = []
    for _ in range(2):  # the second run is answered from the cache
        r = shou("run", "--json", "What is the key?", server=srv, MY_SERVICE_TOKEN=SECRET, SHOU_CACHE="1")
        assert r.returncode == 0, r.stderr
        runs.append(_events(r.stdout))
    assert len(srv.requests) == 2, "the second run was not answered from the cache"
    for events in runs:
        shown = "".join(e["text"] for e in events if e["type"] == "text_delta")
        assert shown == "The key is [redacted], and again: [redacted]."
        args = "".join(e["arguments"] for e in events if e["type"] == "tool_call_delta")
        assert SECRET not in args and "[redacted]" in args
        assert [e["name"] for e in events if e["type"] == "tool_call_delta" and e["name"]] == ["calculator"]
        assert events[-1]["answer"] == shown
    assert sum(e["type"] == "text_delta" for e in runs[0]) > 1  # still streamed in pieces, not all at the end
    for text in _cached_texts(tmp_path):
        assert SECRET not in text
    for path in (workspace / ".shou").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
