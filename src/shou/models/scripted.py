"""A deterministic scripted model for tests and demos, in-process or as a loopback HTTP server.

A script is a list of turns (or `{"turns": [...]}`); each request consumes the next turn. The format, its
validation (`load_script`) and playing it live in `script.py`. `ScriptedModel` answers through the `Model`
protocol; `ScriptedServer` (`scripted_server.py`, and `python -m shou.models.scripted --script F --port 0`)
speaks the OpenAI Chat Completions wire format, streaming (SSE) or not, so the real HTTP client can be
tested against it, and can inject faults (`FaultPlan`). This module is where they are all imported from.

Of the wire-only keys a turn may have, `ScriptedModel` plays `stall` and `no_usage`, ignores the others
and refuses the three that would change the reply (`cut_after`, `reset_after`, `raw_body`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import (
    ModelAuthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from ..messages import Message, messages_to_wire
from ..usage import Usage
from .backend import Backend
from .base import Completion, ModelEvent, ModelSettings, TextChunk, ToolCallChunk
from .pipeline import ModelCall
from .ratelimit import RateLimiter
from .runtime import RetryPolicy
from .script import Answer, Playback, Script, error_message, fragments, load_script, render

if TYPE_CHECKING:
    from .scripted_server import FaultPlan, ScriptedServer, main

# `Script`, `load_script`, `FaultPlan`, `ScriptedServer` and `main` are re-exported: they have always been
# imported from here (and `python -m shou.models.scripted` runs `main`).
__all__ = ["FaultPlan", "Script", "ScriptedModel", "ScriptedServer", "load_script", "main"]
_SERVER_NAMES = ("FaultPlan", "ScriptedServer", "main")


def __getattr__(name: str) -> Any:
    # The server's names are imported when first asked for: a run with `--model scripted:FILE` plays its
    # script in-process and needs none of http.server, socketserver and argparse (~5 ms of its start).
    if name in _SERVER_NAMES:
        from . import scripted_server

        return getattr(scripted_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_CHANGES_REPLY = ("cut_after", "reset_after", "raw_body")  # wire-only keys ScriptedModel cannot honour
_ERROR_CLASSES = {401: ModelAuthError, 403: ModelAuthError, 404: ModelNotFoundError, 429: ModelRateLimitError}


def _model_error(turn: dict[str, Any]) -> ModelError:
    status, message, retry_after = turn["error"], error_message(turn), turn.get("retry_after")
    cls = _ERROR_CLASSES.get(status, ModelUnavailableError if status >= 500 else ModelResponseError)
    return cls(message, status=status, retry_after=None if retry_after is None else float(retry_after))


class ScriptedModel(Backend):
    """An in-process `Model` that plays a script; `.requests` holds the Chat Completions bodies it got.

    Like a provider, it keeps a request's `max_tokens`: a turn whose reply is longer is cut there
    (`finish_reason: length`, its calls dropped). `limiter` and `retry`: see `Backend` (no retries by
    default: a script's error turn is meant to be seen).
    """

    def __init__(self, script: Script, name: str = "scripted", *, limiter: RateLimiter | None = None,
                 retry: RetryPolicy | None = None) -> None:
        self.name = name
        self.limiter, self.retry = limiter, retry
        turns = load_script(script)
        for n, turn in enumerate(turns):
            for key in _CHANGES_REPLY:
                if key in turn:
                    raise ValueError(f"turn {n}: {key!r} acts only when the script is served over HTTP "
                                     "(ScriptedServer)")
        self._script = Playback(turns)

    def answered(self, n: int) -> None:
        """Go on after the first `n` turns: they answered the calls a resumed run's log already holds."""
        self._script.answered(n)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far, in order: `{"model", "messages" (wire dicts), "tools", ...settings}`."""
        return self._script.requests

    async def attempt(self, call: ModelCall) -> AsyncIterator[ModelEvent]:
        """Play the next turn: text and tool-call fragments of `chunk_size`, then one `Completion`.

        Raises the `ModelError` subclass for an `error` turn, `ModelResponseError` when exhausted.
        """
        messages, tools, settings = call.messages, call.tools, call.settings
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
        answer = _within(render(n, turn, body["messages"]), settings)
        events: list[ModelEvent] = []
        if answer.text:
            events += [TextChunk(piece) for piece in fragments(answer.text, answer.chunk_size)]
        for i, call in enumerate(answer.tool_calls):
            for j, piece in enumerate(fragments(call.arguments, answer.chunk_size)):
                events.append(ToolCallChunk(i, call.name if j == 0 else None, piece))
        for k, event in enumerate(events):
            if k == len(events) // 2 and turn.get("stall"):
                await asyncio.sleep(turn["stall"])
            yield event
        usage = Usage(answer.usage["prompt_tokens"], answer.usage["completion_tokens"], 1)
        if turn.get("no_usage"):
            usage = Usage(requests=1)
        message = Message.assistant(answer.text or None, answer.tool_calls)
        yield Completion(message, usage, answer.finish_reason, self.name)

    async def aclose(self) -> None:
        """Nothing to release."""


def _within(answer: Answer, settings: ModelSettings | None) -> Answer:
    """`answer` cut at the request's reply limit, as a provider cuts it: about 4 characters a token of
    its text are kept, its calls are dropped, and it ends `length`."""
    limit = settings.max_tokens if settings is not None else None
    if not limit or answer.usage["completion_tokens"] <= limit:
        return answer
    usage = {**answer.usage, "completion_tokens": limit}
    usage["total_tokens"] = usage["prompt_tokens"] + limit
    return replace(answer, text=answer.text[: limit * 4], tool_calls=(), finish_reason="length", usage=usage)


if __name__ == "__main__":
    from .scripted_server import main as serve

    serve(sys.argv[1:])
