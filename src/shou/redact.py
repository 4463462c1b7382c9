"""Secrets never leave: the values of the keys shou knows are replaced by `[redacted]` in every event, so in
nothing stored (the session log, traces) and nothing sent to a model (requests are built from events).

Known keys: the model's `api_key`, and every variable of the environment (the process's, and the
workspace's `.env`) whose name ends in `_API_KEY`, `_KEY`, `_TOKEN`, `_SECRET` or `_PASSWORD`. Values
shorter than 8 characters are left alone: they are not secret enough to find without false hits.
"""

from __future__ import annotations

import dataclasses
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
    """The secret values these settings and environments hold."""
    found: set[str] = set()
    key = getattr(settings, "api_key", None)
    if key:
        found.add(str(key))
    envs = [os.environ if environ is None else environ, getattr(settings, "env", None) or {}]
    for env in envs:
        for name, value in env.items():
            if value and _SECRET_NAME.search(name):
                found.add(str(value))
    return sorted((v for v in found if len(v) >= MIN_LENGTH), key=len, reverse=True)


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
            return ToolCall(value.id, value.name, self.text(value.arguments))
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
