"""Secrets never leave: the values of the keys shou knows are replaced by `[redacted]` in every event, so in
nothing stored (the session log, traces) and nothing sent to a model (requests are built from events).

Known keys: every secret setting (`api_key`, `tavily_api_key`, ...), and every variable of the process's
environment and of the workspace's `.env` (trusted or not: an untrusted file's values are never used, but
a program can still print them) whose name ends in `_API_KEY`, `_KEY`, `_TOKEN`, `_SECRET` or
`_PASSWORD`; and what URLs carry (`url_secrets`: a login, key-like query values, and in a URL shou sends to
its fragment and key-like path parts) in the base URL and the other URL settings, and in variables whose name
ends in `_URL`, `_URI`, `_ENDPOINT` or `_PROXY`. Values
shorter than 8 characters are left alone: not secret enough to find without false hits.
A secret is also found as JSON spells it (quotes, backslashes, `\\u` escapes) and inside tool-call arguments
written with any other JSON escapes.
In the bytes of a file shou serves (`in_bytes`), it is also found as other encodings spell it (UTF-16/32,
base64, hex, percent-encoded, reversed: shou.redact_encoded).

Which values are secret is shou.known_secrets's business (settings, environments, `.env`, MCP server tables).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from .events import Event, field_names
from .messages import Message, TextPart, ToolCall

if TYPE_CHECKING:
    from .redact_encoded import EncodedSecrets

__all__ = ["REDACTED", "Redactor", "json_spellings", "looks_like_key", "looks_secret", "url_path_secrets",
           "url_secrets"]

REDACTED = "[redacted]"
_SECRET_NAME = re.compile(r"(?:^|_)(?:API_KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
MIN_LENGTH = 8


# Variables that hold URLs, which may carry a login or a key: a base URL with `user:pass@` (sent as basic
# auth), a proxy's login, `?api_key=` in a webhook.
_URL_NAME = re.compile(r"(?:^|_)(?:URL|URI|ENDPOINT|PROXY)$", re.IGNORECASE)
_HEADERS_NAME = re.compile(r"(?:^|_)HEADERS$", re.IGNORECASE)
_FEW = 8  # secrets (counting their JSON spellings) up to which a search per secret beats the expression
_KEY_QUERY = re.compile(r"(?:key|token|secret|sig|password|auth)", re.IGNORECASE)


def looks_secret(value: str) -> bool:
    """Whether `value` looks like a key or password rather than a word: long, or mixing kinds of characters."""
    if len(value) < 12 or any(c.isspace() for c in value):
        return len(value) >= 24 and not any(c.isspace() for c in value)
    kinds = sum((any(c.islower() for c in value), any(c.isupper() for c in value), any(c.isdigit() for c in value),
                 any(not c.isalnum() for c in value)))
    return kinds >= 2 or len(value) >= 24


def looks_like_key(value: str) -> bool:
    """Whether a value named nothing secret still looks like a key: one long word mixing letters and digits
    (or a very long one), not a path, a package, a URL or a version."""
    if any(c.isspace() for c in value) or value.startswith(("/", "~", ".", "-", "@")) or "/" in value or "==" in value:
        return False
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    return (len(value) >= 16 and letters and digits) or len(value) >= 40


def url_path_secrets(path: str) -> list[str]:
    """The parts of a URL path that look like a key (`/s/TOKEN/mcp`): hidden when shown and redacted."""
    return [p for p in path.split("/") if p and looks_like_key(p)]


def url_secrets(url: str | None, bare: bool = True, sent: bool = False) -> set[str]:
    """The secrets a URL carries: its login (`user:password@`: the pair, its basic-auth value, and with `bare`
    the password alone; a user name alone, as a token, the same way) and the values of key-like query
    parameters. Without `bare` (a URL in a variable shou does not send to, `DATABASE_URL`), a bare password
    counts only when it looks like a key: "postgres" must not vanish from every answer. With `sent` (a URL shou
    sends requests to: the model's base URL, an MCP server's, a webhook), also its fragment and its key-like path
    parts, as written and decoded: a gateway's key is often a path part (`/v1/sk-proj-.../`), and what the
    URL is shown with when it cannot be reached must not carry it."""
    if not url or "://" not in url:
        return set()
    found = _login_and_query_secrets(url, bare)
    if sent:
        from urllib.parse import unquote, urlsplit

        try:
            parts = urlsplit(url)
            path, fragment = parts.path, parts.fragment
        except ValueError:  # an invalid netloc ("[::1"): the path and fragment as written after the host
            rest = url.split("://", 1)[1]
            rest, _, fragment = rest.partition("#")
            path = "/" + rest.split("?", 1)[0].partition("/")[2]
        if fragment:
            found.update({fragment, unquote(fragment)})
        for part in url_path_secrets(path):
            found.update({part, unquote(part)})
    return found


def _login_and_query_secrets(url: str, bare: bool) -> set[str]:
    """`url_secrets` of a URL's login and key-like query values."""
    import base64
    from urllib.parse import parse_qsl, unquote, urlsplit

    found: set[str] = set()
    rest = url.split("://", 1)[1]
    logins = set()
    if "@" in rest:
        # As the client reads it (the host part ends at the first / ? #), and as a person may have meant it
        # (the userinfo runs to the last @: a password may hold / ? # unencoded).
        logins.add(re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[0])
        logins.add(rest.rpartition("@")[0])
    for userinfo in filter(None, logins):
        user_raw, _, pass_raw = userinfo.partition(":")
        user, password = unquote(user_raw), unquote(pass_raw)
        login = f"{user}:{password}"
        secret = password or user  # `https://sk-live-...@host`: the user name is the token
        if password or bare or looks_secret(secret):  # the pair, as written, decoded and as basic auth
            found.update({userinfo, login, base64.b64encode(login.encode()).decode()})
        if bare or looks_secret(secret):
            found.update({secret, pass_raw or user_raw})
    try:
        query = urlsplit(url).query
    except ValueError:
        query = rest.partition("?")[2]
    for name, value in parse_qsl(query):
        if _KEY_QUERY.search(name) and value:
            found.add(value)
    for part in query.split("&"):  # as written, percent-encoding and all
        name, _, value = part.partition("=")
        if _KEY_QUERY.search(unquote(name)) and value:
            found.add(value)
    return found


def _header_values(value: str) -> set[str]:
    """The whole of a `key=value,key=value` headers variable, and each value in it."""
    from urllib.parse import unquote

    found = {value}
    for part in value.split(","):
        _, _, item = part.partition("=")
        if item.strip():
            found.update({item.strip(), unquote(item.strip())})
    return found


def json_spellings(value: str) -> set[str]:
    """`value` and how a JSON string writes it (without the quotes), with `\\u` escapes and without."""
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}


class Redactor:
    """Replaces known secret values in text and in events."""

    # The secrets' other encodings (in_bytes), made when first asked: a class default, so making a Redactor
    # (and every event's check) costs what it did.
    _encoded: EncodedSecrets | None = None

    def __init__(self, values: Iterable[str]) -> None:
        # Longest first: where one secret holds another, the whole of it is replaced. Each secret also as JSON
        # spells it (`Pa\\"ss`, `p\\u00e4ss`): tool-call arguments are JSON text, streamed and cached as such,
        # and every path that redacts text must find it there too.
        self.values = sorted({s for v in values if len(v) >= MIN_LENGTH for s in json_spellings(v)},
                             key=len, reverse=True)
        self._by_first: dict[str, list[str]] | None = None  # the secrets by their first character (held_back)
        self._pattern = re.compile("|".join(re.escape(v) for v in self.values)) if self.values else None
        # The secrets as they appear in JSON text (escaped where JSON escapes), and a JSON \u escape, which
        # could spell one: what `checked()` looks for in an event's JSON before walking the event.
        spelled = {orjson.dumps(v)[1:-1] for v in self.values} | {v.encode() for v in self.values}
        self._json = re.compile(b"|".join([re.escape(v) for v in spelled] + [re.escape(b"\\u")])) if spelled \
            else None
        # Whether any of them occurs at all (the common answer: none does) is asked of every event and message.
        # For a few secrets, a substring search per secret is several times cheaper than the expression,
        # which tries its alternatives at every position; the answer is the same.
        few = len(self.values) <= _FEW
        self._texts = tuple(self.values) if few else None
        self._spelled = (*sorted(spelled), b"\\u") if few and spelled else None

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """The expression that finds every secret (longest first), or None when there are none."""
        return self._pattern

    def held_back(self, text: str) -> int:
        """How many characters at the end of `text` could be the start of a secret (0 when none could)."""
        if self._by_first is None:
            self._by_first = {}
            for v in self.values:
                self._by_first.setdefault(v[0], []).append(v)
        longest = len(self.values[0]) if self.values else 0
        # From the furthest place a secret not yet complete could start: the first that could is the answer.
        for i in range(max(0, len(text) - longest + 1), len(text)):
            starting = self._by_first.get(text[i])
            if starting is not None:
                rest = text[i:]
                if any(len(v) > len(rest) and v.startswith(rest) for v in starting):
                    return len(text) - i
        return 0

    def may_hold(self, data: bytes) -> bool:
        """Whether JSON text `data` may hold a secret (one of them, or a JSON escape that could spell one)."""
        if self._spelled is not None:
            # Not `v in data`: bytes' `in` first tries `v` as an int, raising and clearing a TypeError each time
            # (~2,000 instructions, twice an event); `find` takes the bytes as they are.
            find = data.find
            for v in self._spelled:  # noqa: SIM110 (a loop, not any(): no generator for the usual one or two)
                if find(v) >= 0:
                    return True
            return False
        return self._json is not None and self._json.search(data) is not None

    def _holds(self, text: str) -> bool:
        """Whether `text` (not empty) holds a secret; only asked when there are secrets."""
        if self._texts is not None:
            for v in self._texts:  # noqa: SIM110
                if v in text:
                    return True
            return False
        return self._pattern is not None and self._pattern.search(text) is not None

    def checked(self, event: Event) -> tuple[Event, bytes | None]:
        """The event with secrets replaced, and its JSON when that was made on the way (to be stored as is).

        The JSON is made first and searched: an event holding no secret, nor a JSON escape that could spell
        one, is passed on untouched, and its JSON saves the store making it again."""
        if self._json is None:
            return event, None
        try:
            data = orjson.dumps(event.to_dict())
        except TypeError:
            return self.event(event), None
        if not self.may_hold(data):
            return event, data
        return self.event(event), None

    def text(self, text: str) -> str:
        """`text` with every secret value replaced (the same object when it holds none)."""
        if self._pattern is None or not text or not self._holds(text):
            return text
        return self._pattern.sub(REDACTED, text)

    def in_bytes(self, data: bytes) -> bytes:
        """`data` (a file's bytes, text or not: what the files API and A2A artifacts hand out) with every secret
        value replaced as spelled in UTF-8, longest first, and then as other encodings spell it (UTF-16/32,
        base64, hex, percent-encoded, reversed: shou.redact_encoded); the same object when it holds none."""
        for value in self.values:
            spelled = value.encode("utf-8", "surrogatepass")
            if spelled in data:
                data = data.replace(spelled, REDACTED.encode())
        if not self.values:
            return data
        if self._encoded is None:  # made on first use: only serving files needs it, never the event path
            from .redact_encoded import EncodedSecrets

            self._encoded = EncodedSecrets(self.values)
        return self._encoded.redact(data)

    def value(self, value: Any) -> Any:
        """Strings, messages, tool calls, lists and dicts, with secrets replaced (other values as they are).
        What holds no secret comes back as the same object: every event passes here, so the common case
        must cost a few lookups, not a copy and a deep comparison."""
        if self._pattern is None:
            return value
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is ToolCall:
            new = (self.text(value.id), self.text(value.name), self._arguments(value.arguments))
            if new[0] is value.id and new[1] is value.name and new[2] is value.arguments:
                return value
            return ToolCall(*new)
        if kind is Message:
            content = value.content
            if isinstance(content, str):
                content = self.text(content)
            elif isinstance(content, tuple):
                parts = tuple(TextPart(self.text(p.text)) if isinstance(p, TextPart) and self.text(p.text) is not p.text
                              else p for p in content)
                content = parts if any(a is not b for a, b in zip(parts, value.content, strict=True)) else content
            calls = tuple(self.value(c) for c in value.tool_calls)
            if content is value.content and all(a is b for a, b in zip(calls, value.tool_calls, strict=True)):
                return value
            return Message(value.role, content, calls, value.tool_call_id, value.name)
        if kind is dict:
            changed = {k: new for k, v in value.items() if (new := self.value(v)) is not v}
            return {**value, **changed} if changed else value
        if kind is list or kind is tuple:
            items = [self.value(v) for v in value]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value
            return kind(items)
        if isinstance(value, str | ToolCall | Message | dict | list | tuple):  # a subclass: the careful way
            return self._slow(value)
        return value

    def _slow(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(str(value))
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        return value

    def _arguments(self, raw: str) -> str:
        """Call arguments with secrets replaced, also where JSON escapes (`\\u0073k-...`) spell them."""
        text = self.text(raw)
        if "\\" in text:
            try:
                decoded = json.loads(text)
            except ValueError:
                return text
            cleaned = self.value(decoded)
            if cleaned != decoded:
                return json.dumps(cleaned, ensure_ascii=False)
        return text

    def event(self, event: Event) -> Event:
        """The event with secrets replaced in every field (the same object when there was nothing to hide)."""
        if self._pattern is None:
            return event
        changes = {}
        for name in field_names(type(event)):
            if name in _REDACTED_BEFORE:
                continue
            old = getattr(event, name)
            if old is None or type(old) in _NO_TEXT:
                continue
            new = self.value(old)
            if new is not old:
                changes[name] = new
        return dataclasses.replace(event, **changes) if changes else event


_NO_TEXT = frozenset({int, float, bool})
# Fields made of hashes, or of request contents the trace recorder redacted as it took them in (walking
# a request's tool schemas again for every step would cost more than the rest of the event).
_REDACTED_BEFORE = frozenset({"messages", "tools_ref", "contents"})
