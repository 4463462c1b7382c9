"""The trace record of a model request: each message and the tool specs stored once, by content hash.

A run's requests share most of their messages (step 30 resends steps 1-29), so a request event lists
hashes and carries the contents of only those its session's log does not hold yet
(`ModelRequest.contents`): the history is stored once, in the same row write as the event, with no
second table to update on the hot path. A message is hashed the first time the run sends it; the same
object in a later request costs a dictionary lookup.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..messages import Message
from ..wellformed import well_formed

if TYPE_CHECKING:
    from ..models.base import ModelSettings
    from ..redact import Redactor

MAX_CONTENT_BYTES = 1_000_000  # one message kept in a trace; a bigger one (an image, a huge paste) is cut


def content_hash(data: bytes) -> str:
    """The key a message is recorded under: 128 bits of BLAKE2b, hex."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # what orjson refuses (huge integers, a lone surrogate): the trace is a record, not a body
        return orjson.dumps(well_formed(value), default=str)


# What every run of a process sends alike (its agents' system texts and tool specs) is hashed once for all of them:
# (system text or the specs' ids, the redactor's id) -> (the redactor, the specs or None, the hash). Each entry keeps
# the objects whose ids it is keyed on alive, so no other can take their ids. Per run it was most of what a
# recorder held while its run waited for the model (issue 35).
_SHARED: dict[tuple[Any, int], tuple[Any, Any, str]] = {}
_MOST_SHARED = 512
# What the entries keep alive outlives the runs, and a system text can be a caller's own words (`shou serve`'s
# OpenAI-style system messages, up to its 2 MB body): the table holds at most this much of them, as JSON bytes,
# and none bigger than an eighth of it (such a text is hashed again for each request, as any message is once).
_MOST_SHARED_BYTES = 8 << 20
_shared_bytes = 0


class RequestRecorder:
    """Hashes a run's request messages and tool specs; collects the contents its session has not logged.

    `known` is the session's set of hashes whose contents are in its log (`Session.trace_keys`); it is
    updated as contents are handed out.
    """

    def __init__(self, known: set[str] | None = None, redactor: Redactor | None = None) -> None:
        self.known = known if known is not None else set()
        self.redactor = redactor  # known secrets are never stored, in a trace either
        self._new: dict[str, Any] = {}
        # id(object) -> (object, hash): the object is kept so its id cannot be reused by another one
        self._seen: dict[int, tuple[Any, str]] = {}

    def _key(self, obj: Any, wire: Any) -> str:
        known = self._seen.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        key, _ = self._record(wire)
        if len(self._seen) > 50_000:
            self._seen.clear()
        self._seen[id(obj)] = (obj, key)
        return key

    def _record(self, wire: Any) -> tuple[str, int]:
        """The hash of `wire` (redacted) and the size of its JSON; its contents wait in `take()` if new."""
        data = _dumps(wire)
        size = len(data)
        if self.redactor is not None and self.redactor.may_hold(data):  # looked for in the JSON, walked if so
            wire = self.redactor.value(wire)
            data = _dumps(wire)
        key = content_hash(data)
        if key not in self.known:
            self.known.add(key)
            if len(data) > MAX_CONTENT_BYTES:
                wire = {"_cut": f"{len(data)} bytes, over the trace's limit of {MAX_CONTENT_BYTES}",
                        "head": data[:MAX_CONTENT_BYTES // 2].decode("utf-8", "replace")}
            self._new[key] = wire
        return key, size

    def messages(self, messages: list[Message]) -> tuple[str, ...]:
        """The hashes of `messages`; the contents of new ones wait in `take()`."""
        return tuple(self._message(m) for m in messages)

    def _message(self, m: Message) -> str:
        known = self._seen.get(id(m))
        if known is not None and known[0] is m:
            return known[1]
        if m.role != "system" or type(m.content) is not str or m.tool_calls or m.name is not None \
                or m.tool_call_id is not None:
            return self._key(m, m.to_wire())
        # The system message is made again for every request, mostly with the same text: hashed once per text.
        return self._shared(m.content, None, m.to_wire)

    def tools(self, specs: list[dict[str, Any]]) -> str:
        """The hash of the tool specs (empty when none are offered)."""
        if not specs:
            return ""
        # Each request gets its own list of the same spec dicts (a tool builds its spec once): hashed once per
        # set of specs, which the entry keeps alive so their ids name no others.
        kept = list(specs)
        return self._shared(tuple(map(id, specs)), kept, lambda: kept)

    def _shared(self, what: Any, kept: Any, wire: Callable[[], Any]) -> str:
        """The hash of what is sent as `wire()`, known process-wide by `what`; contents handed out again to a
        session whose log does not hold them."""
        redactor = self.redactor
        entry = _SHARED.get((what, id(redactor)))
        if entry is not None and entry[0] is redactor and entry[2] in self.known:
            return entry[2]
        global _shared_bytes
        key, size = self._record(wire())  # made again for each request: known by `what`, not by id
        if size > _MOST_SHARED_BYTES // 8:
            return key
        if len(_SHARED) >= _MOST_SHARED or _shared_bytes + size > _MOST_SHARED_BYTES:
            _SHARED.clear()
            _shared_bytes = 0
        _SHARED[(what, id(redactor))] = (redactor, kept, key)
        _shared_bytes += size
        return key

    def take(self) -> dict[str, Any] | None:
        """The contents not logged before, for the request event about to be emitted."""
        if not self._new:
            return None
        new, self._new = self._new, {}
        return new


def request_params(settings: ModelSettings | None) -> dict[str, Any] | None:
    """The fields of a request besides its messages and tools that change the answer."""
    if settings is None:
        return None
    out: dict[str, Any] = {k: v for k in ("temperature", "max_tokens", "tool_choice", "parallel_tool_calls")
                           if (v := getattr(settings, k)) is not None}
    out.update(settings.extra)
    return out or None
