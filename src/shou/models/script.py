"""The script a scripted model plays: its format, loading and validating it, and playing it turn by turn.

A script is a list of turns (or `{"turns": [...]}`); each request consumes the next turn:

```
{"text": "hi", "tool_calls": [{"name": "f", "arguments": {...} or "raw text", "id": "opt"}],
 "error": 429, "retry_after": 2, "message": "slow down", "delay": 0.5, "hang": true,
 "chunk_size": 16, "finish_reason": "stop", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
```
Served over HTTP (`ScriptedServer`), a turn can also misbehave the ways real providers and networks do:
```
{"cut_after": N}      send N bytes of the body, then end it cleanly (no finish_reason, no [DONE])
{"reset_after": N}    send N bytes of the body, then reset the connection (RST)
{"stall": 2.5}        stop sending mid-reply (in a tool call's arguments when there is one) for that long
{"raw_body": "<html>...", "content_type": "text/html", "status": 200}   send exactly this instead
{"no_usage": true}    leave out the usage (chunk)
{"call_ids": "omit" | "repeat", "call_index": false}   tool calls without ids / all with one id / no index
{"sse_style": "multiline" | "crlf" | "cr" | "comments"}   data split over lines, other line ends, comments
```
A turn can check what it is sent, as a model that must see an earlier result to go on:
```
{"expect": ["regex", ...], "otherwise": {turn}, ...}
```
The turn plays only when every pattern is found (`re.search`) in the request's messages (their text and
tool calls' names and arguments); else `otherwise` plays and the turn stays for the next request, as a model
that does not see what it did would do it again (without `otherwise`: an error turn, 409). Served with
`turn_by="history"`, an `otherwise` reply counts as a turn of the conversation: use `expect` in order.
`Playback` is the script being played (shared by `ScriptedModel` and the server's threads) and `render`
turns a turn into the `Answer` both of them send.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..jsonfile import load_json
from ..messages import ToolCall

__all__ = ["Answer", "Playback", "Script", "error_message", "fragments", "load_script", "render"]

Script = str | os.PathLike[str] | list[Any] | dict[str, Any]
"""A script: a JSON file path, a list of turns or `{"turns": [...]}`."""

_N, _S = (int, float), (str,)
# fmt: off
_TURN_KEYS: dict[str, tuple[type, ...]] = {
    "text": _S, "tool_calls": (list,), "error": (int,), "retry_after": _N, "message": _S, "delay": _N,
    "chunk_size": (int,), "finish_reason": _S, "usage": (dict,), "hang": (bool,), "summary": (bool,),
    # wire faults (served over HTTP)
    "cut_after": (int,), "reset_after": (int,), "raw_body": _S, "content_type": _S, "status": (int,),
    "no_usage": (bool,), "stall": _N, "call_ids": _S, "call_index": (bool,), "sse_style": _S,
    # a turn that checks its request
    "expect": (list, str), "otherwise": (dict,),
}
_CHOICES = {"call_ids": ("omit", "repeat"), "sse_style": ("multiline", "crlf", "cr", "comments")}
# fmt: on
_CALL_KEYS: dict[str, tuple[type, ...]] = {"name": _S, "arguments": (dict, str), "id": _S}
_USAGE_KEYS: dict[str, tuple[type, ...]] = {"prompt_tokens": (int,), "completion_tokens": (int,)}


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
        data = load_json(Path(script).read_text(encoding="utf-8"))  # deep nesting: a ValueError, not a crash
    if isinstance(data, dict):
        if set(data) != {"turns"}:
            raise ValueError(f"script object must have exactly one key 'turns', got {sorted(data)}")
        data = data["turns"]
    if not isinstance(data, list):
        raise ValueError(f"script must be a list of turns or {{'turns': [...]}}, not {type(data).__name__}")
    for n, turn in enumerate(data):
        _check_turn(n, turn)
    return [dict(turn) for turn in data]


def _check_turn(n: int, turn: Any) -> None:
    """Turn `n`'s keys, their types and the values that go together, or a `ValueError` naming them."""
    _check(f"turn {n}", turn, _TURN_KEYS)
    _check_expect(n, turn)
    for i, call in enumerate(turn.get("tool_calls", [])):
        _check(f"turn {n} tool_calls[{i}]", call, _CALL_KEYS)
        if "name" not in call:
            raise ValueError(f"turn {n} tool_calls[{i}]: missing 'name'")
    _check(f"turn {n} usage", turn.get("usage", {}), _USAGE_KEYS)
    if turn.get("chunk_size", 1) < 1:
        raise ValueError(f"turn {n}: 'chunk_size' must be at least 1")
    if not 400 <= turn.get("error", 400) <= 599:
        raise ValueError(f"turn {n}: 'error' must be an HTTP error status (400-599), not {turn['error']}")
    for key in ("cut_after", "reset_after", "stall"):
        if turn.get(key, 0) < 0:
            raise ValueError(f"turn {n}: {key!r} must not be negative")
    if "cut_after" in turn and "reset_after" in turn:
        raise ValueError(f"turn {n}: 'cut_after' and 'reset_after' exclude each other")
    for key, allowed in _CHOICES.items():
        if key in turn and turn[key] not in allowed:
            raise ValueError(f"turn {n}: {key!r} must be one of {list(allowed)}, not {turn[key]!r}")
    if ("content_type" in turn or "status" in turn) and "raw_body" not in turn:
        raise ValueError(f"turn {n}: 'content_type' and 'status' go with 'raw_body'")
    if not 100 <= turn.get("status", 200) <= 599:
        raise ValueError(f"turn {n}: 'status' must be an HTTP status (100-599), not {turn['status']}")


def _check_expect(n: int, turn: dict[str, Any]) -> None:
    """`expect`: a pattern or a list of them, each a valid regex; `otherwise`: a turn that checks nothing."""
    patterns = turn.get("expect", [])
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        if not isinstance(pattern, str):
            raise ValueError(f"turn {n}: 'expect' must be a regex or a list of them, not {pattern!r}")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"turn {n}: 'expect' pattern {pattern!r} is not a valid regex: {e}") from None
    other = turn.get("otherwise")
    if other is not None:
        if "expect" not in turn:
            raise ValueError(f"turn {n}: 'otherwise' goes with 'expect'")
        _check(f"turn {n} otherwise", other, _TURN_KEYS)
        if "expect" in other or "otherwise" in other:
            raise ValueError(f"turn {n}: an 'otherwise' turn cannot itself expect")


def request_text(body: Any) -> str:
    """What `expect` searches in a request: its messages' text and its tool calls' names and arguments."""
    lines = []
    for m in (body or {}).get("messages") or () if isinstance(body, dict) else ():
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        lines.append(str(content or ""))
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {} if isinstance(call, dict) else {}
            lines.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return "\n".join(lines)


def _met(turn: dict[str, Any], body: Any) -> bool:
    patterns = turn.get("expect")
    if not patterns:
        return True
    text = request_text(body)
    return all(re.search(p, text) for p in ([patterns] if isinstance(patterns, str) else patterns))


@dataclass(frozen=True, slots=True)
class Answer:
    """A rendered turn: what both the in-process model and the server send."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: dict[str, int]
    chunk_size: int


def render(n: int, turn: dict[str, Any], wire_messages: Any) -> Answer:
    """Turn `n` as an `Answer`, with usage estimated from the request's wire messages unless the turn sets it."""
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
    return Answer(text, calls, finish, usage, turn.get("chunk_size", 16))


def fragments(s: str, size: int) -> list[str]:
    """`s` cut into `size`-character fragments; an empty string is one empty fragment."""
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


def error_message(turn: dict[str, Any]) -> str:
    """The message an `error` turn fails with."""
    return str(turn.get("message") or f"scripted error {turn['error']}")


class Playback:
    """The turns, a cursor and the recorded requests, shared safely across server threads."""

    def __init__(self, turns: list[dict[str, Any]], record: str | os.PathLike[str] | None = None,
                 turn_by: str = "order") -> None:
        if turn_by not in ("order", "history"):
            raise ValueError(f"turn_by must be 'order' or 'history', not {turn_by!r}")
        self.turns = turns
        self.turn_by = turn_by
        self.used: set[int] = set()
        self.requests: list[Any] = []
        self._record = record
        self._lock = threading.Lock()

    def record(self, body: Any) -> int:
        """Keep a request (and append it to the record file); return its number."""
        with self._lock:
            self.requests.append(body)
            if self._record is not None:
                with open(self._record, "a", encoding="utf-8") as f:
                    f.write(json.dumps(body) + "\n")
            return len(self.requests) - 1

    def take(self, body: Any = None) -> tuple[int, dict[str, Any]] | None:
        """The next turn for this request and its index, or `None` when the script has none left.

        Turns marked `"summary": true` answer only shou's compaction requests (recognised by the marker
        in their system message) and the others only ordinary requests, so a script need not predict
        exactly when compaction happens.
        """
        with self._lock:
            taken = self._next(body)
            if taken is None:
                return None
            n, turn = taken
            if not _met(turn, body):  # not what the turn needs to see: it stays for the next request
                return n, turn.get("otherwise") or {"error": 409, "message": f"scripted model: turn {n} "
                                                    f"expected {turn['expect']!r} in the request"}
            self.used.add(n)
            return taken

    def peek(self, body: Any = None) -> tuple[int, dict[str, Any]] | None:
        """The turn `take` would give, left in place (a fault answers instead of it)."""
        with self._lock:
            taken = self._next(body)
            if taken is not None and not _met(taken[1], body):
                n, turn = taken
                return n, turn.get("otherwise") or {"error": 409, "message": "expectation not met"}
            return taken

    def _next(self, body: Any) -> tuple[int, dict[str, Any]] | None:
        if self.turn_by == "history":
            # The conversation says where it is: as many assistant messages as turns already answered. A
            # request repeated after a crash (or a resumed run) gets the same turn again.
            n = sum(1 for m in (body or {}).get("messages") or () if m.get("role") == "assistant")
            return (n, self.turns[n]) if n < len(self.turns) else None
        want = _is_compaction(body)
        for i in range(len(self.turns)):
            if i not in self.used and bool(self.turns[i].get("summary")) == want:
                return i, self.turns[i]
        return None

    def answered(self, n: int) -> None:
        """`n` requests were answered before, by a process that was killed, whose run is being resumed from its
        log: the turns they took are passed over, so the next request gets the turn after them, as a model
        would give it. Only up to the first turn with `expect`: an `otherwise` reply answers a request without
        taking its turn, so how many such a turn gave is not known; it checks the conversation itself instead."""
        with self._lock:
            stop = next((i for i, t in enumerate(self.turns) if "expect" in t), len(self.turns))
            self.used.update(range(min(n, stop)))

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
