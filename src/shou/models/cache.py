"""An opt-in response cache: the same request to the same model is answered from disk, with no provider call.

`CachedModel(inner, ResponseCache(path))` is a `Model`; the `Cache` control of the model pipeline serves it.
Its key is a SHA-256 over everything that changes the answer: for a Chat Completions model, the request
body itself (minus how it is transported) and the endpoint; for any other model, its name, the messages,
the tools and every setting. A miss streams from the inner model and keeps what came; only a complete
reply (`stop` or `tool_calls`) is stored, never one cut at the output limit, voided by a retry or ended by
an error. A hit replays the same text and call fragments and a `Completion` marked `cached`, with zero
usage and zero cost: no request was made.

Meant for development and tests (re-running a task replays it for free), so it is off unless asked for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..messages import Message
from ..usage import Usage
from .base import Completion, Model, ModelEvent, ModelSettings, Retrying, TextChunk, ToolCallChunk
from .pipeline import ModelCall, Next, StreamEvent, own_stream

__all__ = ["Cache", "CachedModel", "ResponseCache", "cache_key"]

_log = logging.getLogger("shou.cache")

STORED_FINISHES = ("stop", "tool_calls")  # complete replies; "length" is cut, and None never completes
_KEY_VERSION = 2  # bump when what goes into the key or the value changes: old entries then simply miss
_TRANSPORT_FIELDS = ("stream", "stream_options")  # how the answer travels, not what it is
# The reply limit only cuts a reply short; it does not change a complete one. It is left out of the key (a
# budget lowers it to what is left, which differs from run to run), and a stored reply answers a request
# only when it fits the request's limit.
_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")
BUSY_MS = 250


class ResponseCache:
    """Replies keyed by request hash, in one SQLite table (WAL), made with its folder on first use.

    Safe to share between the tasks and threads of one process (one connection behind a lock; each call
    is a single indexed read or write, well under a millisecond, so it is not worth a thread hop).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._warned = False

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            # Replies hold the user's conversations: readable by the user alone.
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(fd)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                # Another process writing the same cache: wait briefly (this runs on the event loop), then it
                # is a miss, or a reply not kept.
                db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # a lost entry after a power cut is only a miss
                db.execute("CREATE TABLE IF NOT EXISTS responses "
                           "(key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)")
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored value for `key`, or None (also when it cannot be read: a damaged or busy cache is only a
        miss, never the end of a run)."""
        try:
            with self._lock:
                row = self._conn().execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        except (sqlite3.Error, OSError) as e:
            self._unusable(e)
            return None
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store `value` (JSON-able) under `key`, replacing what was there; a cache that cannot be written
        keeps nothing (the reply itself was already paid for and is used)."""
        raw = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        try:
            with self._lock:
                self._conn().execute("INSERT OR REPLACE INTO responses (key, value, created) VALUES (?, ?, ?)",
                                     (key, raw, time.time()))
        except (sqlite3.Error, OSError) as e:
            self._unusable(e)

    def _unusable(self, error: BaseException) -> None:
        """Say once per cache that it cannot be used, and drop the connection (the next call tries again)."""
        if not self._warned:
            self._warned = True
            _log.warning("the response cache %s cannot be used (%s: %s); requests go to the provider",
                         self.path, type(error).__name__, error)
        with self._lock:
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                self._db = None

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn().execute("SELECT count(*) FROM responses").fetchone()[0])

    def clear(self) -> None:
        """Forget every stored reply."""
        with self._lock:
            self._conn().execute("DELETE FROM responses")

    def close(self) -> None:
        """Close the database (it reopens on the next use)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def cache_key(model: Any, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None
              ) -> str:
    """The SHA-256 (hex) of everything about a request to `model` that changes the answer."""
    request_body = getattr(model, "request_body", None)
    if callable(request_body):
        # The body is exactly what the provider sees, so nothing that matters can be left out by mistake.
        body = {k: v for k, v in request_body(messages, tools, settings).items()
                if k not in _TRANSPORT_FIELDS and k not in _LIMIT_FIELDS}
        what: dict[str, Any] = {"body": body, "base_url": getattr(model, "base_url", "")}
    else:
        settings = settings or ModelSettings()
        what = {"model": model.name, "messages": [m.to_wire() for m in messages], "tools": tools,
                "settings": {f.name: getattr(settings, f.name) for f in fields(ModelSettings)
                             if f.name not in _LIMIT_FIELDS}}
    what["v"] = _KEY_VERSION
    # default=repr: a setting JSON cannot hold still gets a stable spelling instead of failing the call
    raw = json.dumps(what, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)
    return hashlib.sha256(raw.encode()).hexdigest()


class CachedModel:
    """`inner` behind a `ResponseCache`: a `Model` whose repeated requests cost nothing.

    Attributes it does not have (`model`, `provider`, `base_url`, ...) are the inner model's.
    """

    def __init__(self, inner: Model, cache: ResponseCache, redact: Callable[[str], str] | None = None) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        # Known secrets a reply echoed leave it before it is kept: the cache outlives the workspace, and a hit
        # replays into logs whose redactor may not know them.
        self.redact = redact

    def __repr__(self) -> str:
        return f"CachedModel({self.inner!r}, {self.cache!r})"

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a half-built object): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def aclose(self) -> None:
        """Close the inner model's connections (the cache stays usable)."""
        await self.inner.aclose()

    def stream(
        self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The stored reply when there is one, else the inner model's, stored when it is complete."""
        return Cache()(ModelCall(messages, tools, settings, self), own_stream)


class Cache:
    """The response cache as a control of the model pipeline: a call to a `CachedModel` is answered from
    its cache when it can be, else passed on as a call to the inner model, and its complete reply kept.
    It sits outside retry and rate limit, so a hit spends no request slot and waits for no limiter; inside
    fallback, so each model of a chain has its own entries (a reply of one provider never answers another).

    A call to any other model passes straight through (no generator of its own: this runs on every call).
    """

    __slots__ = ()

    def __call__(self, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The call's events: replayed, or the inner model's."""
        model = call.model
        if not isinstance(model, CachedModel):
            return next(call)
        return _through(model, call, next)


async def _through(model: CachedModel, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
    inner = model.inner
    key = cache_key(inner, call.messages, call.tools, call.settings)
    hit = model.cache.get(key)
    replay = _replay(hit) if hit is not None and _fits(hit, call.settings) else None
    if replay is not None:
        for event in replay:
            yield event
        return
    recorded: list[TextChunk | ToolCallChunk] = []
    events = next(ModelCall(call.messages, call.tools, call.settings, inner))
    try:
        async for event in events:
            if isinstance(event, TextChunk | ToolCallChunk):
                recorded.append(event)
            elif isinstance(event, Retrying):
                recorded.clear()  # what streamed before a retry is void: it is not part of the reply
            elif isinstance(event, Completion) and event.finish_reason in STORED_FINISHES:
                value = _stored(recorded, event)
                if model.redact is not None:
                    value = {**_strings(value, model.redact),
                             "chunks": _redacted_chunks(value["chunks"], model.redact)}
                model.cache.put(key, value)  # before passing it on: a consumer may stop there
            yield event
    finally:
        close = getattr(events, "aclose", None)  # a model's own stream may be a plain async iterator
        if close is not None:
            await close()


def _strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (JSON-able) with `change` applied to every string in it."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_strings(v, change) for v in value]
    if isinstance(value, dict):
        return {k: _strings(v, change) for k, v in value.items()}
    return value


def _fits(value: dict[str, Any], settings: ModelSettings | None) -> bool:
    """Whether a stored reply fits the request's reply limit (with none, any complete reply does)."""
    limit = settings.max_tokens if settings is not None else None
    if not limit:
        return True
    try:
        return int(value.get("reply_tokens", 1 << 62)) <= limit
    except (TypeError, ValueError):
        return False


def _stored(chunks: list[TextChunk | ToolCallChunk], done: Completion) -> dict[str, Any]:
    """The JSON form of a reply: its fragments in order and its completion."""
    return {
        "chunks": [["text", c.text] if isinstance(c, TextChunk) else ["call", c.index, c.name, c.arguments]
                   for c in chunks],
        "message": done.message.to_wire(),
        "finish_reason": done.finish_reason,
        "model": done.model,
        "sent_model": done.sent_model,
        # what it cost when it was asked: for reports of what the cache saved (never charged again)
        "usage": {"input_tokens": done.usage.input_tokens, "output_tokens": done.usage.output_tokens},
        # its length in tokens, to check a later request's reply limit against: as reported, else its UTF-8
        # bytes (an upper bound: a token is at least one byte)
        "reply_tokens": done.usage.output_tokens or sum(len((c.text if isinstance(c, TextChunk) else
                                                             (c.name or "") + c.arguments).encode()) for c in chunks),
    }


def _redacted_chunks(chunks: list[list[Any]], redact: Callable[[str], str]) -> list[list[Any]]:
    """Stored fragments with secrets replaced in the assembled text of each run of text fragments (and of
    each call's argument fragments): a secret the provider split across fragments is found whole. A run that
    holds one is kept as one fragment; the others keep their fragments as they came."""
    runs: list[list[list[Any]]] = []
    for c in chunks:
        last = runs[-1][-1] if runs else None
        same = last is not None and last[0] == c[0] and (c[0] == "text" or (last[1] == c[1] and c[2] is None))
        if same:
            runs[-1].append(c)
        else:
            runs.append([c])
    out: list[list[Any]] = []
    for run in runs:
        pieces = [str(c[-1]) for c in run]
        whole = "".join(pieces)
        clean = redact(whole)
        out.extend(run if clean == whole else [[*run[0][:-1], clean]])
    return out


def _replay(value: dict[str, Any]) -> list[ModelEvent] | None:
    """The events of a stored reply, the `Completion` marked cached and free; None if the entry is unreadable."""
    try:
        events: list[ModelEvent] = []
        for chunk in value["chunks"]:
            if chunk[0] == "text":
                events.append(TextChunk(str(chunk[1])))
            else:
                events.append(ToolCallChunk(int(chunk[1]), chunk[2], str(chunk[3])))
        message = Message.from_wire(value["message"])
        done = Completion(message, Usage(), value["finish_reason"], str(value.get("model") or ""),
                          str(value.get("sent_model") or ""), cached=True)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None  # written by another version, or damaged: ask the provider instead
    events.append(done)
    return events
