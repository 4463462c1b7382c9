"""How a provider's failures read: the `ModelError` for a transport failure, an HTTP error status, or an
error reported in a body, with a message that says what happened and names the setting to change.

`where` is how the message names the provider (its base URL, credentials masked). Which class an error
gets decides whether `OpenAICompatible` retries it: 429, 5xx, 408, timeouts and cut or broken replies are
transient; a refused key, an unknown model or a rejected request are not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..config import redact_urls
from ..errors import (
    ModelAuthError,
    ModelCutOffError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
    ModelUnreachableError,
)
from .reply import Reply
from .runtime import parse_retry_after

__all__ = ["http_error", "preview", "provider_error", "transport_error"]

# error types and codes (OpenAI's and the common proxies') that retrying cannot fix
_TERMINAL_KINDS = ("invalid_request", "context_length", "content_filter", "content_policy", "invalid_api_key",
                   "authentication", "permission", "not_found", "unsupported")


def transport_error(where: str, e: BaseException, reply: Reply) -> ModelError:
    """A failure to connect, or a connection that broke or timed out before or during the reply (an aiohttp
    `ClientError`)."""
    import aiohttp

    what = _describe(e)
    if isinstance(e, aiohttp.InvalidURL) or type(e).__name__.endswith("UrlClientError"):
        return ModelError(f"cannot reach {where} ({what}); the base URL (--base-url / SHOU_BASE_URL) must "
                          "start with http:// or https://")
    if isinstance(e, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError | aiohttp.ClientHttpProxyError):
        return ModelUnreachableError(
            f"cannot reach {where} ({what}); is the server running and the base URL right (--base-url / "
            "SHOU_BASE_URL)?"
        )
    timed_out = isinstance(e, aiohttp.ServerTimeoutError)
    if isinstance(e, aiohttp.ClientResponseError) and not reply.started:  # the response could not be parsed
        return ModelUnavailableError(f"{where} sent a response that is not valid HTTP ({type(e).__name__}: "
                                     f"{redact_urls(' '.join(str(e.message).split()))[:300]}); if this repeats, "
                                     "check the base URL "
                                     "(--base-url / SHOU_BASE_URL)")
    if not reply.started:  # connected, but no response began
        if timed_out:
            return ModelUnavailableError(f"no answer from {where} in time ({what}); the server may be overloaded")
        return ModelUnavailableError(
            f"the connection to {where} closed before any reply ({what}); if this repeats, check the base URL "
            "(--base-url / SHOU_BASE_URL)"
        )
    if timed_out:
        return ModelCutOffError(
            f"no answer from {where} in time: the reply stalled after {reply.progress()} ({what})"
        )
    return ModelCutOffError(
        f"the connection to {where} broke in the middle of the reply ({what}) after {reply.progress()}"
    )


def http_error(where: str, status: int, reason: str, headers: Mapping[str, str], body: bytes, *, model: str,
               key_setting: str, model_setting: str, charset: str | None = None) -> ModelError:
    """An HTTP error status, with what the body says. `key_setting` and `model_setting` name where the user
    configures the key and the model."""
    detail = redact_urls(_error_detail(body, reason, charset))
    where = f"{where} answered HTTP {status}: {detail}"
    if status in (401, 403):
        return ModelAuthError(
            f"the provider refused the API key ({where}). Set {key_setting} (or SHOU_API_KEY) "
            "to a valid key.", status=status,
        )
    if status == 404:
        return ModelNotFoundError(
            f"model {model!r} was not found ({where}). Set {model_setting} to a model this "
            "provider serves, and check the base URL.", status=status,
        )
    retry_after = parse_retry_after(headers.get("retry-after"))
    if status == 429:
        return ModelRateLimitError(f"rate limited ({where})", status=status, retry_after=retry_after)
    if status >= 500 or status == 408:
        return ModelUnavailableError(f"provider error ({where})", status=status, retry_after=retry_after)
    return ModelResponseError(f"request rejected ({where})", status=status)


def provider_error(where: str, data: Any, when: str) -> ModelError:
    """The error a provider reported in a body (mid-stream, or in a 200 response): its own message."""
    err = data.get("error", data) if isinstance(data, dict) else data
    message = f"{where} reported an error {when}: {redact_urls(_message_of(data))[:500]}"
    kind, status = "", None
    if isinstance(err, dict):
        kind = f"{err.get('type') or ''} {err.get('code') or ''}".lower()
        status = next((v for v in (err.get("code"), err.get("status")) if type(v) is int), None)
    if "rate_limit" in kind or status == 429:
        return ModelRateLimitError(message, status=status)
    if any(k in kind for k in _TERMINAL_KINDS) or (status is not None and 400 <= status < 500):
        return ModelResponseError(message, status=status)
    return ModelUnavailableError(message, status=status)


def _describe(e: BaseException) -> str:
    """`Type: message` of an exception, with the cause underneath when it says more (a bare ReadError)."""
    seen = e
    while not str(seen) and (seen.__cause__ or seen.__context__) is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    what = type(e).__name__
    if seen is not e:
        what += f": {type(seen).__name__}"
    return what + (f": {redact_urls(str(seen))}" if str(seen) else "")


def preview(raw: str | bytes, size: int = 200) -> str:
    """The start of a body, whitespace squeezed, credentials in URLs masked."""
    text = raw[: size * 4].decode("utf-8", "replace") if isinstance(raw, bytes) else raw[: size * 4]
    text = redact_urls(" ".join(text.split()))
    return text if len(text) <= size else text[:size] + "…"


def _message_of(data: Any) -> str:
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(data)


def _error_detail(body: bytes, reason: str, charset: str | None = None) -> str:
    try:
        return _message_of(json.loads(body))[:300]
    except ValueError:
        pass
    try:
        text = body[:1200].decode(charset or "utf-8", "replace")
    except (LookupError, UnicodeError):  # a charset Python does not know, or one that is not a text encoding
        text = body[:1200].decode("utf-8", "replace")
    return text[:300] or reason
