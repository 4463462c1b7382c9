"""The script served as an OpenAI-compatible HTTP server on a loopback port, with fault injection.

`ScriptedServer` (and `python -m shou.models.scripted --script F --port 0`, which runs `main`) speaks the
OpenAI Chat Completions wire format, streaming (SSE) or not, so the real HTTP client can be tested against
it. Each request plays the next turn of the script (`script.py`), rendered by `scripted_wire.py`, including
the turn's wire faults (`cut_after`, `reset_after`, `stall`, `raw_body`, ...). With
`ScriptedServer(turns, faults=FaultPlan(rate=0.3, ...))` (`--fault-rate` and friends on the command line) a
random share of requests is answered with a fault (429, 5xx, a reset, a cut in a tool call's arguments, a
stall) instead of their turn, so the retry gets the same turn.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from .script import Playback, Script, error_message, load_script
from .scripted_faults import FaultPlan
from .scripted_wire import error_body, reply_body

__all__ = ["FaultPlan", "ScriptedServer", "main"]


NOT_JSON = b'data: {"id": "chatcmpl-scripted", "choices": [{"delta": {"content": "ha\n\n'  # half an event
PORTAL = b"<!DOCTYPE html><html><head><title>Sign in to the network</title></head><body>Log in first</body></html>"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate sends: with Nagle's algorithm and the client's delayed ACK,
    # every reply would wait ~40 ms for nothing.
    disable_nagle_algorithm = True
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
        self._json(status, error_body(status, message), headers)

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
            self.server.faults_injected.clear()
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
        script, server = self.server.script, self.server
        number = script.record(body)
        expected = server.api_key
        if expected is not None and self.headers.get("Authorization") != f"Bearer {expected}":
            self._error(401, "Incorrect API key provided (scripted server)")
            return
        body = body if isinstance(body, dict) else {}
        if "response_format" in body and not server.response_format:  # as a provider without structured output
            kind = (body["response_format"] or {}).get("type") if isinstance(body["response_format"], dict) else None
            self._error(400, f"Invalid parameter: 'response_format' of type {kind!r} is not supported with this "
                             "model (scripted server)")
            return
        fault = server.draw_fault()
        if fault is not None and (peeked := script.peek(body)) is not None:
            server.faults_injected.append({"request": number, "kind": fault})
            self._fault(fault, *peeked, body)
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
            self._error(turn["error"], error_message(turn), headers)
            return
        if "raw_body" in turn:
            pieces = [turn["raw_body"].encode()]
            status, ctype = turn.get("status", 200), turn.get("content_type", "text/plain; charset=utf-8")
            mid = len(pieces[0]) // 2
            framing = "length"
        else:
            status, framing = 200, "chunked" if body.get("stream") else "length"
            ctype, pieces, mid = reply_body(n, turn, body)
        if "cut_after" in turn:
            framing = "close"  # a clean end: the body is whole as far as HTTP can tell
        stop = turn.get("cut_after", turn.get("reset_after"))
        self._send(status, ctype, pieces, framing, stop_at=stop, reset="reset_after" in turn,
                   stall=turn.get("stall", 0), stall_at=mid)

    def _fault(self, kind: str, n: int, turn: dict[str, Any], body: dict[str, Any]) -> None:
        """Answer with a fault instead of turn `n` (which stays for the retry)."""
        if kind.isdigit():
            status = int(kind)
            self._error(status, f"scripted fault: HTTP {status}")
            return
        if kind == "html":
            self._send(200, "text/html; charset=utf-8", [PORTAL], "length")
            return
        ctype, pieces, mid = reply_body(n, turn, body)
        stream = bool(body.get("stream"))
        if kind == "garbage" and stream:  # spliced in before the finish_reason; the rest of the reply follows
            at = max(0, min(len(pieces) // 2, len(pieces) - 3))
            self._send(200, ctype, [*pieces[:at], NOT_JSON, *pieces[at:]], "chunked")
        elif kind in ("cut", "garbage"):  # a clean end mid-reply; a whole JSON body cannot end cleanly early: breaks
            self._send(200, ctype, pieces, "close" if stream else "length", stop_at=mid)
        elif kind == "reset":
            self._send(200, ctype, pieces, "chunked" if stream else "length", stop_at=mid, reset=True)
        else:  # stall, then end there: a client with a shorter read timeout gives up first, any other sees a cut
            stall = self.server.faults.stall_seconds if self.server.faults else 1.0
            self._send(200, ctype, pieces, "chunked" if stream else "length", stop_at=mid, stall=stall, stall_at=mid)

    def _send(
        self, status: int, ctype: str, pieces: list[bytes], framing: str, *, stop_at: int | None = None,
        reset: bool = False, stall: float = 0, stall_at: int = 0,
    ) -> None:
        """Send `pieces` as the body, framed `chunked`, by `length` or by `close`; pause `stall` seconds at
        byte `stall_at`; with `stop_at`, end after that many bytes: cleanly, or with an RST if `reset`."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if framing == "chunked":
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
        elif framing == "length":
            self.send_header("Content-Length", str(sum(map(len, pieces))))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        chunked = framing == "chunked"
        sent = 0
        for piece in pieces:
            if stall and sent <= stall_at < sent + len(piece):
                self._write(piece[: stall_at - sent], chunked)
                piece, sent = piece[stall_at - sent :], stall_at
                if not self._wait(stall):
                    return
                stall = 0
            if stop_at is not None and sent + len(piece) >= stop_at:
                self._write(piece[: stop_at - sent], chunked)
                break
            self._write(piece, chunked)
            sent += len(piece)
        if reset:
            time.sleep(0.05)  # let the client read what was sent, so the reset comes mid-reply
            self._reset()
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        if stop_at is not None:
            self.close_connection = True

    def _write(self, data: bytes, chunked: bool) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
            self.wfile.flush()

    def _reset(self) -> None:
        """Abort the connection with an RST (SO_LINGER 0), as a crashed proxy or a dropped NAT entry does."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            os.close(self.connection.detach())


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # not joined on close: idle keep-alive or hanging handlers must not block it
    # socketserver's backlog of 5 drops connections in a burst (20 runs at once), and the client's retry
    # of a dropped SYN comes a second later: a real server's backlog is in the hundreds.
    request_queue_size = 128

    def __init__(
        self, addr: tuple[str, int], script: Playback, model: str, api_key: str | None, faults: FaultPlan | None,
        response_format: bool = True,
    ) -> None:
        super().__init__(addr, _Handler)
        self.script, self.model, self.api_key, self.faults = script, model, api_key, faults
        self.response_format = response_format
        self.stopping = threading.Event()
        self.faults_injected: list[dict[str, Any]] = []
        self._random = random.Random(faults.seed if faults else None)
        self._in_a_row = 0
        self._lock = threading.Lock()

    def draw_fault(self) -> str | None:
        """A fault for the next request, drawn from the plan, or None."""
        if self.faults is None or not self.faults.rate:
            return None
        with self._lock:
            cap = self.faults.max_in_a_row
            if self._random.random() >= self.faults.rate or (cap is not None and self._in_a_row >= cap):
                self._in_a_row = 0
                return None
            self._in_a_row += 1
            return self._random.choice(self.faults.kinds)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer is normal in timeout tests; report anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ScriptedServer:
    """The script served as an OpenAI-compatible HTTP server on a background thread.

    `with ScriptedServer(turns) as srv:` gives `srv.base_url` (`http://127.0.0.1:PORT/v1`) and
    `srv.requests` (every request body, parsed, in arrival order). Port 0 picks a free port. With
    `faults=FaultPlan(...)`, a random share of requests gets a fault instead of a turn
    (`srv.faults_injected`). `turn_by="history"` answers each request with the turn its conversation has
    reached (the number of assistant messages in it) instead of the next unused one, so a run killed and
    resumed, or a request repeated, gets the turn it would have got. `response_format=False` answers a request
    that carries a `response_format` with a 400, as a provider without structured output does.
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
        faults: FaultPlan | None = None,
        turn_by: str = "order",
        response_format: bool = True,
    ) -> None:
        self._script = Playback(load_script(script), record, turn_by)
        self._server = _HTTPServer((host, port), self._script, model, api_key, faults, response_format)
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

    def extend(self, turns: list[dict[str, Any]]) -> None:
        """Add turns to the end of the script while it serves: for a test that learns what a later turn must
        say (a file name a tool made up) only as it goes."""
        more = load_script(turns)
        with self._script._lock:
            self._script.turns.extend(more)

    @property
    def faults_injected(self) -> list[dict[str, Any]]:
        """The faults sent instead of a turn: `{"request": index into requests, "kind": ...}`, in order."""
        return self._server.faults_injected

    def start(self) -> ScriptedServer:
        """Serve on a daemon thread; returns `self`."""
        if self._thread is None:
            # a short poll interval: close() waits for it, and tests start and close many servers
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="scripted-server",
                                            daemon=True)
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
    parser.add_argument("--no-response-format", action="store_true",
                        help="answer a request with a response_format with a 400, as a provider without it")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="share of requests answered with a fault")
    default = FaultPlan()
    parser.add_argument("--fault-kinds", default=",".join(default.kinds),
                        help="comma-separated: HTTP error statuses, reset, cut, stall, garbage, html "
                             "(default: %(default)s)")
    parser.add_argument("--fault-seed", type=int, help="seed for the fault draws")
    parser.add_argument("--fault-stall", type=float, default=default.stall_seconds,
                        help="seconds a 'stall' fault waits (default: %(default)s)")
    parser.add_argument("--fault-max-in-a-row", type=int, help="at most this many faults in a row")
    args = parser.parse_args(argv)
    faults = None
    if args.fault_rate:
        try:
            kinds = tuple(k.strip() for k in args.fault_kinds.split(",") if k.strip())
            faults = FaultPlan(args.fault_rate, kinds, args.fault_seed, args.fault_stall, args.fault_max_in_a_row)
        except ValueError as e:
            parser.error(str(e))
    server = ScriptedServer(args.script, host=args.host, port=args.port, api_key=args.api_key, record=args.record,
                            faults=faults, response_format=not args.no_response_format)
    print(f"listening on {server.base_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.close()


