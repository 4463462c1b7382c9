"""Secrets never leave: the values of the keys shou knows are replaced by `[redacted]` in every event, so in
nothing stored (the session log, traces) and nothing sent to a model (requests are built from events).

Known keys: every secret setting (`api_key`, `tavily_api_key`, ...), and every variable of the process's
environment and of the workspace's `.env` (trusted or not: an untrusted file's values are never used, but
a program can still print them) whose name ends in `_API_KEY`, `_KEY`, `_TOKEN`, `_SECRET` or
`_PASSWORD`. Values shorter than 8 characters are left alone: not secret enough to find without false hits.
A secret is also found inside tool-call arguments written with JSON escapes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .events import Event
from .messages import Message, TextPart, ToolCall

__all__ = ["REDACTED", "Redactor", "secrets_of"]

REDACTED = "[redacted]"
_SECRET_NAME = re.compile(r"(?:^|_)(?:API_KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
MIN_LENGTH = 8


def secrets_of(settings: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values these settings, environments and the workspace's `.env` hold."""
    from .settings import SECRET_FIELDS

    found: set[str] = set()
    for name in SECRET_FIELDS:
        value = getattr(settings, name, None)
        if value:
            found.add(str(value))
    envs = [os.environ if environ is None else environ, getattr(settings, "env", None) or {},
            _workspace_dotenv(getattr(settings, "workspace", None))]
    for env in envs:
        for name, value in env.items():
            if value and _SECRET_NAME.search(name):
                found.add(str(value))
    return sorted((v for v in found if len(v) >= MIN_LENGTH), key=len, reverse=True)


def _workspace_dotenv(workspace: Any) -> Mapping[str, str]:
    if workspace is None:
        return {}
    try:
        from .trust import read_config_file

        data = read_config_file(workspace / ".env")
        if data is None:
            return {}
        import io

        from dotenv import dotenv_values

        parsed = dotenv_values(stream=io.StringIO(data.decode("utf-8", "replace")), interpolate=False)
        return {k: v for k, v in parsed.items() if v is not None}
    except Exception:  # an unreadable .env hides nothing we could know
        return {}


class Redactor:
    """Replaces known secret values in text and in events."""

    def __init__(self, values: Iterable[str]) -> None:
        self.values = [v for v in values if len(v) >= MIN_LENGTH]
        self._pattern = re.compile("|".join(re.escape(v) for v in self.values)) if self.values else None

    def text(self, text: str) -> str:
        """`text` with every secret value replaced."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def value(self, value: Any) -> Any:
        """Strings, messages, tool calls, lists and dicts, with secrets replaced (other values as they are)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, ToolCall):
            return ToolCall(self.text(value.id), self.text(value.name), self._arguments(value.arguments))
        if isinstance(value, Message):
            content = value.content
            if isinstance(content, str):
                content = self.text(content)
            elif isinstance(content, tuple):
                content = tuple(TextPart(self.text(p.text)) if isinstance(p, TextPart) else p for p in content)
            return Message(value.role, content, tuple(self.value(c) for c in value.tool_calls), value.tool_call_id,
                           value.name)
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
        for f in dataclasses.fields(event):
            old = getattr(event, f.name)
            new = self.value(old)
            if new != old:
                changes[f.name] = new
        return dataclasses.replace(event, **changes) if changes else event
