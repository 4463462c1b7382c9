"""Exceptions raised by shou.

```
ShouError                      base of everything below
├── UserError                  the developer misused the API (bad tool declaration, bad config)
│   └── ConfigError            settings missing or invalid: the message says which setting to set
├── ModelError                 the model provider failed; `.retryable` says whether trying again may help
│   ├── ModelAuthError         401/403: names the key setting (terminal)
│   ├── ModelNotFoundError     404: names the model setting (terminal)
│   ├── ModelRateLimitError    429 after every retry
│   ├── ModelUnavailableError  5xx, connect or read timeout after every retry
│   │   ├── ModelCutOffError   the reply ended before it was complete (stream cut, connection broken mid-reply)
│   │   └── ModelUnreachableError  no connection at all (refused, no such host): retried only briefly
│   └── ModelResponseError     a response that could not be understood (terminal)
└── ToolError                  raised by a tool to hand the model a clean error message
```
A `ToolError` never escapes the executor: it becomes an error `ToolResult` the model sees. Any other
exception from a tool becomes one too, with its type named.
"""

from __future__ import annotations


class ShouError(Exception):
    """Base class for shou's exceptions."""


class UserError(ShouError):
    """The developer used shou wrongly; the message says how to fix it."""


class ConfigError(UserError):
    """A setting is missing or invalid."""


class ModelError(ShouError):
    """The model provider failed to answer."""

    retryable = False

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class ModelAuthError(ModelError):
    """The provider refused the API key (401/403)."""


class ModelNotFoundError(ModelError):
    """The provider does not know the model (404)."""


class ModelRateLimitError(ModelError):
    """The provider is rate limiting (429)."""

    retryable = True


class ModelUnavailableError(ModelError):
    """The provider is down, overloaded or unreachable (5xx, timeouts, connection errors)."""

    retryable = True


class ModelCutOffError(ModelUnavailableError):
    """The reply stopped before its end: no `finish_reason` arrived (stream closed early, connection broken).

    Retryable: tool calls are acted on only after a complete reply, so nothing of the cut one has run.
    """


class ModelUnreachableError(ModelUnavailableError):
    """No connection could be made (refused, unknown host). Retried a couple of times only: a server that
    is not running or a mistyped base URL does not heal in a minute, and the person should hear so soon."""


class ModelResponseError(ModelError):
    """The provider answered with something that is not a valid Chat Completions response."""


class ToolError(ShouError):
    """Raise inside a tool to give the model an error message (no traceback, no type name)."""
