"""The trace record of a model request: each message and the tool specs stored once, by content hash.

A run's requests share most of their messages (step 30 resends steps 1-29), so the request event lists
hashes and the store keeps each distinct message once (`SQLiteStore.put_blob`). A message is hashed the
first time the run sends it; the same object in a later request costs a dictionary lookup.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import orjson

from ..messages import Message

if TYPE_CHECKING:
    from ..models.base import ModelSettings
    from ..redact import Redactor
    from ..store.sqlite import SQLiteStore

MAX_BLOB_BYTES = 1_000_000  # one message kept in a trace; a bigger one (an image, a huge paste) is cut


def content_hash(data: bytes) -> str:
    """The key a blob is stored under: 128 bits of BLAKE2b, hex."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # what orjson refuses (huge integers): the trace is a record, not a wire body
        return orjson.dumps(value, default=str)


class RequestRecorder:
    """Hashes a run's request messages and tool specs and hands new ones to the store."""

    def __init__(self, store: SQLiteStore | None, redactor: Redactor | None = None) -> None:
        self.store = store
        self.redactor = redactor  # known secrets are never stored, in a trace either
        # id(object) -> (object, hash): the object is kept so its id cannot be reused by another one
        self._seen: dict[int, tuple[Any, str]] = {}

    def _key(self, obj: Any, wire: Any) -> str:
        known = self._seen.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        if self.redactor is not None:
            wire = self.redactor.value(wire)
        data = _dumps(wire)
        key = content_hash(data)
        if self.store is not None:
            if len(data) > MAX_BLOB_BYTES:
                data = orjson.dumps({"_cut": f"{len(data)} bytes, over the trace's limit of {MAX_BLOB_BYTES}",
                                     "head": data[:MAX_BLOB_BYTES // 2].decode("utf-8", "replace")})
            self.store.put_blob(key, data)
        if len(self._seen) > 50_000:
            self._seen.clear()
        self._seen[id(obj)] = (obj, key)
        return key

    def messages(self, messages: list[Message]) -> tuple[str, ...]:
        """The hashes of `messages`, storing the ones not seen before."""
        return tuple(self._key(m, m.to_wire()) for m in messages)

    def tools(self, specs: list[dict[str, Any]]) -> str:
        """The hash of the tool specs (empty when none are offered)."""
        return self._key(specs, specs) if specs else ""


def request_params(settings: ModelSettings | None) -> dict[str, Any] | None:
    """The fields of a request besides its messages and tools that change the answer."""
    if settings is None:
        return None
    out: dict[str, Any] = {k: v for k in ("temperature", "max_tokens", "tool_choice", "parallel_tool_calls")
                           if (v := getattr(settings, k)) is not None}
    out.update(settings.extra)
    return out or None
