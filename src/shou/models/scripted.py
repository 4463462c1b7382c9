"""A deterministic scripted model for tests and demos, in-process or as a loopback HTTP server.

A script is a list of turns (or `{"turns": [...]}`); each request consumes the next turn:

```
{"text": "hi", "tool_calls": [{"name": "f", "arguments": {...} or "raw text", "id": "opt"}],
 "error": 429, "retry_after": 2, "message": "slow down", "delay": 0.5, "hang": true,
 "chunk_size": 16, "finish_reason": "stop", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
```
`ScriptedModel` answers through the `Model` protocol; `ScriptedServer` (and
`python -m shou.models.scripted --script F --port 0`) speaks the OpenAI Chat Completions wire format,
streaming (SSE) or not, so the real HTTP client can be tested against it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import (
    ModelAuthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from ..messages import Message, ToolCall, messages_to_wire
from ..usage import Usage
from .base import Completion, ModelEvent, ModelSettings, TextChunk, ToolCallChunk

__all__ = ["Script", "ScriptedModel", "ScriptedServer", "load_script", "main"]

Script = str | os.PathLike[str] | list[Any] | dict[str, Any]
"""A script: a JSON file path, a list of turns or `{"turns": [...]}`."""

_N, _S = (int, float), (str,)
# fmt: off
_TURN_KEYS: dict[str, tuple[type, ...]] = {
    "text": _S, "tool_calls": (list,), "error": (int,), "retry_after": _N, "message": _S, "delay": _N,
    "chunk_size": (int,), "finish_reason": _S, "usage": (dict,), "hang": (bool,), "summary": (bool,),
}
# fmt: on
_CALL_KEYS: dict[str, tuple[type, ...]] = {"name": _S, "arguments": (dict, str), "id": _S}
_USAGE_KEYS: dict[str, tuple[type, ...]] = {"prompt_tokens": (int,), "completion_tokens": (int,)}
_ERROR_CLASSES = {401: ModelAuthError, 403: ModelAuthError, 404: ModelNotFoundError, 429: ModelRateLimitError}
_ERROR_TYPES = {401: "invalid_request_error", 403: "permission_error", 404: "invalid_request_error", 429: "requests"}
_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def _check(where: str, obj: Any, spec: dict[str, tuple[type, ...]]) -> None:
    """Raise `ValueError` unless `obj` is a dict whose keys are in `spec` with values of the listed types."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: must be an object, not {type(obj).__name__}")
    for key, value in obj.items():
        if key not in spec:
            raise ValueError(f"{where}: unknown key {key!r}; expected one of {sorted(spec)}")
        types = spec[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            names = " or ".join(t.__name__ for t in types)
            raise ValueError(f"{where}: {key!r} must be {names}, not {type(value).__name__} ({value!r})")


def load_script(script: Script) -> list[dict[str, Any]]:
    """Read and validate a script: a JSON file path, a list of turns or `{"turns": [...]}`.

    Raises `ValueError` naming the turn and key on an unknown key or a value of the wrong type.
    """
    data: Any = script
    if isinstance(script, str | os.PathLike):
        data = json.loads(Path(script).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        if set(data) != {"turns"}:
            raise ValueError(f"script object must have exactly one key 'turns', got {sorted(data)}")
        data = data["turns"]
    if not isinstance(data, list):
        raise ValueError(f"script must be a list of turns or {{'turns': [...]}}, not {type(data).__name__}")
    for n, turn in enumerate(data):
        _check(f"turn {n}", turn, _TURN_KEYS)
        for i, call in enumerate(turn.get("tool_calls", [])):
            _check(f"turn {n} tool_calls[{i}]", call, _CALL_KEYS)
            if "name" not in call:
                raise ValueError(f"turn {n} tool_calls[{i}]: missing 'name'")
        _check(f"turn {n} usage", turn.get("usage", {}), _USAGE_KEYS)
        if turn.get("chunk_size", 1) < 1:
            raise ValueError(f"turn {n}: 'chunk_size' must be at least 1")
        if not 400 <= turn.get("error", 400) <= 599:
            raise ValueError(f"turn {n}: 'error' must be an HTTP error status (400-599), not {turn['error']}")
    return [dict(turn) for turn in data]


@dataclass(frozen=True, slots=True)
class _Answer:
    """A rendered turn: what both the in-process model and the server send."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: dict[str, int]
    chunk_size: int


def _render(n: int, turn: dict[str, Any], wire_messages: Any) -> _Answer:
    text = turn.get("text", "")
    calls = tuple(
        ToolCall(
            c.get("id", f"call_{n}_{i}"),
            c["name"],
            a if isinstance(a := c.get("arguments", {}), str) else json.dumps(a),
        )
        for i, c in enumerate(turn.get("tool_calls", []))
    )
    out = len(text) + sum(len(c.name) + len(c.arguments) for c in calls)
    usage = {"prompt_tokens": max(1, len(json.dumps(wire_messages)) // 4), "completion_tokens": max(1, out // 4)}
    usage.update(turn.get("usage", {}))
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    finish = turn.get("finish_reason", "tool_calls" if calls else "stop")
    return _Answer(text, calls, finish, usage, turn.get("chunk_size", 16))


def _pieces(s: str, size: int) -> list[str]:
    """`s` cut into `size`-character fragments; an empty string is one empty fragment."""
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


class _Script:
    """The turns, a cursor and the recorded requests, shared safely across server threads."""

    def __init__(self, turns: list[dict[str, Any]], record: str | os.PathLike[str] | None = None) -> None:
        self.turns = turns
        self.used: set[int] = set()
        self.requests: list[Any] = []
        self._record = record
        self._lock = threading.Lock()

    def record(self, body: Any) -> None:
        with self._lock:
            self.requests.append(body)
            if self._record is not None:
                with open(self._record, "a", encoding="utf-8") as f:
                    f.write(json.dumps(body) + "\n")

    def take(self, body: Any = None) -> tuple[int, dict[str, Any]] | None:
        """The next turn for this request and its index, or `None` when the script has none left.

        Turns marked `"summary": true` answer only shou's compaction requests (recognised by the marker
        in their system message) and the others only ordinary requests, so a script need not predict
        exactly when compaction happens.
        """
        want = _is_compaction(body)
        with self._lock:
            for i in range(len(self.turns)):
                if i not in self.used and bool(self.turns[i].get("summary")) == want:
                    self.used.add(i)
                    return i, self.turns[i]
            return None

    def exhausted_message(self) -> str:
        return f"scripted model: script exhausted after {len(self.turns)} turns"

    def reset(self) -> None:
        with self._lock:
            self.used.clear()
            self.requests.clear()


def _is_compaction(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    return any(m.get("role") == "system" and "[shou:compact]" in str(m.get("content") or "")
               for m in body.get("messages") or ())


def _error_message(turn: dict[str, Any]) -> str:
    return str(turn.get("message") or f"scripted error {turn['error']}")


def _model_error(turn: dict[str, Any]) -> ModelError:
    status, message, retry_after = turn["error"], _error_message(turn), turn.get("retry_after")
    cls = _ERROR_CLASSES.get(status, ModelUnavailableError if status >= 500 else ModelResponseError)
    return cls(message, status=status, retry_after=None if retry_after is None else float(retry_after))


class ScriptedModel:
    """An in-process `Model` that plays a script; `.requests` holds the Chat Completions bodies it got."""

    def __init__(self, script: Script, name: str = "scripted") -> None:
        self.name = name
        self._script = _Script(load_script(script))

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far, in order: `{"model", "messages" (wire dicts), "tools", ...settings}`."""
        return self._script.requests

    async def stream(
        self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None = None
    ) -> AsyncIterator[ModelEvent]:
        """Play the next turn: text and tool-call fragments of `chunk_size`, then one `Completion`.

        Raises the `ModelError` subclass for an `error` turn, `ModelResponseError` when exhausted.
        """
        body: dict[str, Any] = {"model": self.name, "messages": messages_to_wire(messages), "tools": tools}
        if settings is not None:
            for key in ("temperature", "max_tokens", "tool_choice", "parallel_tool_calls"):
                if (value := getattr(settings, key)) is not None:
                    body[key] = value
            body.update(settings.extra)
        self._script.record(body)
        taken = self._script.take(body)
        if taken is None:
            raise ModelResponseError(self._script.exhausted_message(), status=400)
        n, turn = taken
        await asyncio.sleep(turn.get("delay", 0))
        if turn.get("hang"):
            await asyncio.Event().wait()
        if "error" in turn:
            raise _model_error(turn)
        answer = _render(n, turn, body["messages"])
        if answer.text:
            for piece in _pieces(answer.text, answer.chunk_size):
                yield TextChunk(piece)
        for i, call in enumerate(answer.tool_calls):
            for j, piece in enumerate(_pieces(call.arguments, answer.chunk_size)):
                yield ToolCallChunk(i, call.name if j == 0 else None, piece)
        usage = Usage(answer.usage["prompt_tokens"], answer.usage["completion_tokens"], 1)
        message = Message.assistant(answer.text or None, answer.tool_calls)
        yield Completion(message, usage, answer.finish_reason, self.name)

    async def aclose(self) -> None:
        """Nothing to release."""


def _sse_chunks(answer: _Answer, base: dict[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    """The `chat.completion.chunk` objects OpenAI would stream for `answer`."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": "" if not answer.tool_calls else None})
    if answer.text:
        for piece in _pieces(answer.text, answer.chunk_size):
            yield chunk({"content": piece})
    for i, call in enumerate(answer.tool_calls):
        head = {"index": i, **call.to_wire()}
        head["function"]["arguments"] = ""
        yield chunk({"tool_calls": [head]})
        for piece in _pieces(call.arguments, answer.chunk_size):
            if piece:
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, answer.finish_reason)
    if include_usage:
        yield {**base, "choices": [], "usage": answer.usage}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests read stdout and stderr."""

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        error = {"message": message, "type": kind, "code": _ERROR_CODES.get(status), "param": None}
        self._json(status, {"error": error}, headers)

    def _body(self) -> Any:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return json.loads(raw) if raw.strip() else {}

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = {"id": self.server.model, "object": "model", "created": 0, "owned_by": "shou"}
            self._json(200, {"object": "list", "data": [model]})
        elif self.path.rstrip("/") == "/requests":
            self._json(200, self.server.script.requests)
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        try:
            body = self._body()
        except ValueError as exc:
            self._error(400, f"request body is not valid JSON: {exc}")
            return
        path = self.path.rstrip("/")
        if path == "/reset":
            self.server.script.reset()
            self._json(200, {"ok": True})
        elif path in ("/v1/chat/completions", "/chat/completions"):
            self._chat(body)
        else:
            self._error(404, f"no route POST {self.path}")

    def _wait(self, seconds: float | None) -> bool:
        """Sleep `seconds` (forever if `None`); early and False if the client leaves or the server stops."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self.server.stopping.wait(0.02):
            if deadline is not None and time.monotonic() >= deadline:
                return True
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                break
        self.close_connection = True
        return False

    def _chat(self, body: Any) -> None:
        script = self.server.script
        script.record(body)
        expected = self.server.api_key
        if expected is not None and self.headers.get("Authorization") != f"Bearer {expected}":
            self._error(401, "Incorrect API key provided (scripted server)")
            return
        taken = script.take(body)
        if taken is None:
            self._error(400, script.exhausted_message())
            return
        n, turn = taken
        if turn.get("delay") and not self._wait(turn["delay"]):
            return
        if turn.get("hang"):
            self._wait(None)
            return
        if "error" in turn:
            ra = turn.get("retry_after")
            headers = {} if ra is None else {"Retry-After": f"{ra:g}"}
            self._error(turn["error"], _error_message(turn), headers)
            return
        body = body if isinstance(body, dict) else {}
        answer = _render(n, turn, body.get("messages", []))
        base = {"id": f"chatcmpl-scripted-{n}", "created": int(time.time()), "model": body.get("model", "")}
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(_sse_chunks(answer, {**base, "object": "chat.completion.chunk"}, include_usage))
            return
        message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
        if answer.tool_calls:
            message["tool_calls"] = [c.to_wire() for c in answer.tool_calls]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}
        self._json(200, {**base, "object": "chat.completion", "choices": [choice], "usage": answer.usage})

    def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
        for event in events:
            raw = event.encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # not joined on close: idle keep-alive or hanging handlers must not block it

    def __init__(self, addr: tuple[str, int], script: _Script, model: str, api_key: str | None) -> None:
        super().__init__(addr, _Handler)
        self.script, self.model, self.api_key = script, model, api_key
        self.stopping = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer is normal in timeout tests; report anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ScriptedServer:
    """The script served as an OpenAI-compatible HTTP server on a background thread.

    `with ScriptedServer(turns) as srv:` gives `srv.base_url` (`http://127.0.0.1:PORT/v1`) and
    `srv.requests` (every request body, parsed, in arrival order). Port 0 picks a free port.
    """

    def __init__(
        self,
        script: Script,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        model: str = "scripted",
        record: str | os.PathLike[str] | None = None,
    ) -> None:
        self._script = _Script(load_script(script), record)
        self._server = _HTTPServer((host, port), self._script, model, api_key)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """`http://HOST:PORT/v1`, ready for an OpenAI client's base URL."""
        return f"http://{self._server.server_address[0]}:{self.port}/v1"

    @property
    def requests(self) -> list[Any]:
        """Every request body received on the chat endpoint, in order (errors included)."""
        return self._script.requests

    def start(self) -> ScriptedServer:
        """Serve on a daemon thread; returns `self`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-server", daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until `close()` (or KeyboardInterrupt)."""
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving, release hanging handlers and the socket."""
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    """`python -m shou.models.scripted --script F --port N`: serve until killed."""
    parser = argparse.ArgumentParser(prog="python -m shou.models.scripted", description="Serve a script.")
    parser.add_argument("--script", required=True, help="JSON script: a list of turns or {'turns': [...]}")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--record", help="append each request body to this file as a JSON line")
    parser.add_argument("--api-key", help="answer 401 unless 'Authorization: Bearer KEY' is sent")
    args = parser.parse_args(argv)
    server = ScriptedServer(args.script, host=args.host, port=args.port, api_key=args.api_key, record=args.record)
    print(f"listening on {server.base_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.close()


if __name__ == "__main__":
    main(sys.argv[1:])
