"""Chat Completions over aiohttp: OpenAI, DeepSeek, Qwen, Ollama, vLLM, llama.cpp and any compatible server.

Streaming parses the event stream to the spec (`sse.py`), surfaces text as it comes, and assembles tool
calls from their fragments by stream position (`reply.py`). A reply is complete only when it carries a
`finish_reason`: a stream that ends or breaks before one is a `ModelCutOffError`, retried from scratch like
any transient failure. That is safe even after text or call fragments went out: tool calls are acted on
only after the final `Completion`, so nothing of a cut reply has run (whoever showed its text drops it on
`Retrying`). A stream chunk that is not JSON (half an object, a proxy's text spliced in) breaks the
stream the same way, and is retried as a cut one; a 200 whose body is not a reply at all (an HTML page, a
JSON error) is an error naming what arrived.
Failures become the `ModelError` tree with messages that name the setting to change (`provider_errors.py`);
429, 5xx, 408, timeouts and cut or broken replies are retried with backoff by the shared pipeline's `Retry`
control (`backend.py`, `controls.py`), whose `RateLimit` keeps the `limiter`; `attempt()` is one request.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import orjson

from ..config import shown_url
from ..errors import (
    ConfigError,
    ModelCutOffError,
    ModelError,
    ModelResponseError,
    ModelUnavailableError,
)
from ..messages import Message
from ..usage import Usage
from ..wellformed import well_formed
from .backend import Backend
from .base import Completion, ModelEvent, ModelSettings, TextChunk
from .capabilities import OutputMode, supports_response_format
from .connections import Connections, Timeout, UploadStalled, request_body
from .pipeline import ModelCall
from .provider_errors import http_error, preview, provider_error, transport_error
from .ratelimit import RateLimiter
from .reply import Reply, json_message
from .runtime import RetryPolicy
from .sse import SSEDecoder

DEFAULT_TIMEOUT = Timeout(read=120.0, connect=10.0)
MAX_REPLY_BYTES = 64_000_000  # no reply is this big; a server that keeps sending is not giving one
_SSE_START = (b"data:", b"event:", b":", b"id:", b"retry:")


class OpenAICompatible(Backend):
    """A model behind a `/chat/completions` endpoint.

    `key_setting` and `model_setting` name where the user configures the key and the model, so errors
    can tell them exactly what to change (e.g. `DEEPSEEK_API_KEY`). `limiter` and `retry`: see `Backend`.
    `timeout` is a `Timeout` (connect, and each next piece of the reply) or seconds for the reply's pieces.
    `client` is an `aiohttp.ClientSession` to send through instead of the model's own. `response_format`:
    whether the provider takes a `json_schema` response format (None: known models do).
    """

    def __init__(
        self, model: str, *, base_url: str, api_key: str | None = None, provider: str = "openai",
        stream: bool = True, retry: RetryPolicy | None = None, timeout: Timeout | float = DEFAULT_TIMEOUT,
        headers: dict[str, str] | None = None, key_setting: str = "SHOU_API_KEY",
        model_setting: str = "--model / SHOU_MODEL", client: Any = None,
        limiter: RateLimiter | None = None, response_format: bool | None = None,
    ) -> None:
        self.model = model
        # How a typed answer is asked for (capabilities.output_mode): the provider's structured output when it
        # is said to take it (`response_format`), else known by name; otherwise a final tool call.
        take = supports_response_format(model) if response_format is None else response_format
        self.output_mode: OutputMode = "response_format" if take else "tool"
        self.provider = provider
        self.name = f"{provider}:{model}"
        self.base_url = base_url.rstrip("/")
        self.streaming = stream
        self.retry = retry or RetryPolicy()
        self.key_setting = key_setting
        self.model_setting = model_setting
        self._url = self.base_url + "/chat/completions"
        self._where = shown_url(self.base_url)  # how errors name it: never with credentials in it (path parts too)
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        key = (api_key or "").strip()  # a key pasted with its line break
        if any(ord(c) < 32 or ord(c) == 127 for c in key):
            raise ConfigError(f"the API key ({key_setting}) contains a control character; set it again without it")
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._target: tuple[str, dict[str, str]] | None = None
        self.connections = Connections(timeout, client)
        self.limiter = limiter  # shared by every model of the provider: `ratelimit.limiter_for`

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatible({self.name!r}, base_url={self._where!r})"

    async def aclose(self) -> None:
        """Close this event loop's connections, if this model made them (others close with their loops)."""
        await self.connections.aclose()

    def request_body(
        self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None
    ) -> dict[str, Any]:
        """The JSON body for one request."""
        body: dict[str, Any] = {"model": self.model, "messages": [m.to_wire() for m in messages]}
        if tools:
            body["tools"] = tools
        if self.streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if settings is not None:
            if settings.temperature is not None:
                body["temperature"] = settings.temperature
            if settings.max_tokens is not None:
                body["max_tokens"] = settings.max_tokens
            if settings.tool_choice is not None and tools:
                body["tool_choice"] = settings.tool_choice
            if settings.parallel_tool_calls is not None and tools:
                body["parallel_tool_calls"] = settings.parallel_tool_calls
            body.update(settings.extra)
        return body

    def prepare(self, call: ModelCall) -> None:
        """The request body, encoded once for every attempt."""
        call.prepared = _dumps(self.request_body(call.messages, call.tools, call.settings))

    def rate_tokens(self, call: ModelCall) -> int:
        """About 4 bytes of JSON per input token, plus all the output it may write: tpm counts both."""
        settings = call.settings
        extra = settings.extra if settings is not None else {}
        limit = settings.max_tokens if settings is not None and settings.max_tokens is not None else None
        return len(call.prepared) // 4 + _int(extra.get("max_tokens", limit) or extra.get("max_completion_tokens"))

    async def attempt(self, call: ModelCall) -> AsyncIterator[ModelEvent]:
        """One request: its text and call fragments, then the `Completion`, or a `ModelError`."""
        import aiohttp

        reply = Reply(self.model)
        try:
            resp = await self._post(call.prepared)
            async with resp:
                reply.started = True
                is_stream, raw = await self._open(reply, resp)
                if not is_stream:  # a whole JSON reply: no generator of its own (this is most calls)
                    for event in self._json_reply(raw, resp):
                        yield event
                    return
                # closed here, not left to the garbage collector: a generator the loop finalizes costs a
                # wake-up from another thread and a task, on every call
                events = self._read(reply, resp, raw)
                try:
                    async for event in events:
                        yield event
                finally:
                    await events.aclose()
        except aiohttp.ClientPayloadError as e:
            if reply.finish is None:
                if _undecodable(e):
                    raise ModelResponseError(f"{self._where} sent a body that cannot be decoded ({e})") from None
                raise transport_error(self._where, e, reply) from None
        except aiohttp.ClientError as e:
            if reply.finish is None:
                raise transport_error(self._where, e, reply) from None
            # the reply was complete; only its usage or the closing [DONE] was lost
        if reply.finish is None:
            raise ModelCutOffError(self._cut(reply, "the stream ended"))
        yield reply.completion()

    async def _post(self, body: bytes) -> Any:
        """Send the request (through the configured proxy, never following a redirect); the response."""
        import aiohttp

        url, headers, https = self._request_target()
        connections = self.connections
        proxy = connections.proxy(url)
        session = await connections.session(proxy)
        proxy_url = proxy_headers = None
        if proxy is not None and not proxy.socks:  # a SOCKS proxy is the session's connection already
            proxy_url = proxy.url
            if proxy.headers and https:
                proxy_headers = proxy.headers  # sent on the CONNECT only; the provider never sees them
            elif proxy.headers:  # a plain-http request goes to the proxy itself: its login rides on it
                headers = {**headers, **proxy.headers}
        try:
            # No redirects: a POST sent elsewhere is not what the user configured (nor was it with httpx).
            return await session.post(url, data=request_body(body, connections.timeout), headers=headers,
                                      allow_redirects=False, proxy=proxy_url, proxy_headers=proxy_headers)
        except UploadStalled as e:
            raise ModelUnavailableError(f"sending the request to {self._where} stalled: {e}; the server or the "
                                        "network stopped taking it") from None
        except ValueError as e:
            if isinstance(e, aiohttp.ClientError):
                raise
            why = shown_url(self.base_url, str(e))
            raise ModelError(f"the request to {self._where} could not be made ({why}); check "
                             "the base URL (--base-url / SHOU_BASE_URL) and the configured headers") from None

    async def _open(self, reply: Reply, resp: Any) -> tuple[bool, bytes]:
        """Whether a response is an event stream, and what of it was read to tell (all of it when it is not);
        an error status raised."""
        if resp.status >= 400:
            raise http_error(self._where, resp.status, resp.reason or "", resp.headers,
                             await self._read_capped(reply, resp), model=self.model,
                             key_setting=self.key_setting, model_setting=self.model_setting,
                             charset=resp.charset)
        return await self._body_kind(reply, resp)

    async def _read(self, reply: Reply, resp: Any, raw: bytes) -> AsyncIterator[ModelEvent]:
        """The events of an event stream, `raw` being what of it was read already."""
        chunks = resp.content.iter_any()
        decoder = SSEDecoder()
        while True:
            if not reply.head:
                reply.head = raw[:300]
                if _html(reply.head):  # a page labelled as a stream (a proxy's): no retry makes it a reply
                    raise self._not_a_reply(raw, resp)
            events, done = self._events(reply, decoder.feed(raw))
            for event in events:
                yield event
            if done or (raw := await anext(chunks, None)) is None:
                break
            reply.received += len(raw)
            if reply.received > MAX_REPLY_BYTES:
                raise self._too_big()
        async for _ in chunks:  # what follows [DONE]: read it, so the connection can be reused
            pass

    def _events(self, reply: Reply, dispatched: list[tuple[str, str]]) -> tuple[list[ModelEvent], bool]:
        """The fragments carried by the stream's dispatched events, and whether `[DONE]` came."""
        out: list[ModelEvent] = []
        for name, data in dispatched:
            reply.events += 1
            if name == "error":
                raise provider_error(self._where, _json_or_text(data), "mid-stream")
            if data == "[DONE]":
                if reply.finish is None:
                    raise ModelCutOffError(self._cut(reply, "the stream sent [DONE]"))
                return out, True
            if not data or data.isspace() or (name != "message" and not _is_json_object(data)):
                continue  # a keep-alive, or an event of another kind (a named ping)
            out += self._apply(reply, data)
        return out, False

    def _request_target(self) -> tuple[str, dict[str, str], bool]:
        """Where requests go, their headers, and whether they are https, worked out once. A base URL that no
        request can go to is an error at once, not one retried for minutes; `user:password@` in it becomes
        basic auth in place of the key (as httpx sent it) and leaves the URL; the scheme is lower-cased (an
        `HTTPS://` base URL is https, and a proxy's login goes on its CONNECT only)."""
        if self._target is None:
            hint = "the base URL (--base-url / SHOU_BASE_URL)"
            try:  # the error never quotes what could not be parsed: part of a password may be in it
                parts = urlsplit(self._url)
                host, _ = parts.hostname, parts.port
            except ValueError:
                raise ModelError(f"cannot reach {self._where}; {hint} is not a valid URL") from None
            scheme = parts.scheme.lower()
            if scheme not in ("http", "https"):
                raise ModelError(f"cannot reach {self._where}; {hint} must start with http:// or https://")
            if not host:
                raise ModelError(f"cannot reach {self._where}; {hint} names no host")
            headers = self._headers
            if parts.username is not None:
                login = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
                headers = {**headers, "Authorization": "Basic " + base64.b64encode(login).decode()}
            url = urlunsplit(parts._replace(scheme=scheme, netloc=parts.netloc.rpartition("@")[2]))
            self._target = (url, headers, scheme == "https")
        return self._target

    async def _body_kind(self, reply: Reply, resp: Any) -> tuple[bool, bytes]:
        """Whether the body is an event stream, and what of it was read to tell: all of it when it is not."""
        mime = resp.headers.get("content-type", "").partition(";")[0].strip().lower()
        if self.streaming and mime == "text/event-stream":
            return True, b""
        if self.streaming and mime not in ("application/json", "text/html") and not mime.endswith("+json"):
            head = b""  # unlabelled or mislabelled: look at how it starts
            async for chunk in resp.content.iter_any():
                head += chunk
                reply.received += len(chunk)
                if len(head) >= 64:
                    break
            if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_SSE_START):
                return True, head
            return False, head + await self._read_capped(reply, resp)
        return False, await self._read_capped(reply, resp)

    async def _read_capped(self, reply: Reply, resp: Any) -> bytes:
        """The rest of a body, refusing one larger than any reply (a broken or hostile server)."""
        parts = []
        async for chunk in resp.content.iter_any():
            parts.append(chunk)
            reply.received += len(chunk)
            if reply.received > MAX_REPLY_BYTES:
                raise self._too_big()
        return b"".join(parts)

    def _too_big(self) -> ModelResponseError:
        return ModelResponseError(f"{self._where} sent more than {MAX_REPLY_BYTES // 1_000_000} MB for one reply; "
                                  "shou stopped reading it")

    def _apply(self, reply: Reply, data: str) -> list[ModelEvent]:
        """Take in one `chat.completion.chunk`; return the text and call fragments it carries."""
        try:
            chunk = _loads(data)
        except ValueError:  # the stream broke, like one that stops: nothing of it has run, so try again
            if reply.finish is not None:  # the reply is whole already: only its usage could be lost
                return []
            raise ModelCutOffError(
                f"the stream from {self._where} broke: it sent a chunk that is not JSON after {reply.progress()}: "
                f"{preview(data)!r}"
            ) from None
        if not isinstance(chunk, dict):
            raise ModelResponseError(f"{self._where} sent a stream chunk that is not an object: {preview(data)!r}")
        if "error" in chunk:
            raise provider_error(self._where, chunk, "mid-stream")
        try:
            return reply.take(chunk)
        except (AttributeError, TypeError, ValueError):
            raise ModelResponseError(
                f"{self._where} sent a stream chunk that is not a chat completion chunk: {preview(data)!r}"
            ) from None

    def _cut(self, reply: Reply, how: str) -> str:
        message = f"the reply from {self._where} was cut off: {how} without a finish_reason after {reply.progress()}"
        if not reply.events and reply.head:
            message += f"; it began: {preview(reply.head)!r}"
        return message

    def _json_reply(self, raw: bytes, resp: Any) -> list[ModelEvent]:
        """A whole (non-streamed) chat completion, or the error its body names."""
        try:
            data = _loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict) and "choices" in data:
            try:
                choice = data["choices"][0]
                message = json_message(choice)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
                raise ModelResponseError(
                    f"{self._where} sent a response that is not a chat completion ({type(e).__name__}: {e}): "
                    f"{preview(raw)!r}"
                ) from None
            usage = data.get("usage")
            done = Completion(message, Usage.from_wire(usage if isinstance(usage, dict) else None),
                              choice.get("finish_reason"), data.get("model") or self.model, self.model)
            return [TextChunk(message.text), done] if message.text else [done]
        if isinstance(data, dict) and "error" in data:
            raise provider_error(self._where, data, f"in an HTTP {resp.status} response")
        if data is None and raw.lstrip()[:1] in (b"{", b"[") and _unframed(resp):
            # A body without a length ends when the connection does, and aiohttp ends it the same way when the
            # connection was reset: JSON that stops part way is a reply cut off, not one that is not a reply.
            raise ModelCutOffError(f"the reply from {self._where} was cut off: its body stopped after {len(raw)} "
                                   "bytes, before its JSON was complete (it had no length, so the connection "
                                   "closing was its only end)")
        raise self._not_a_reply(raw, resp)

    def _not_a_reply(self, raw: bytes, resp: Any) -> ModelResponseError:
        """The error for a body that is no reply at all, naming what came (and a hint for a web page)."""
        ctype = resp.headers.get("content-type") or "no Content-Type"
        wanted = "an event stream" if self.streaming else "a chat completion"
        body = f"{preview(raw)!r}" if raw else "an empty body"
        hint = ""
        if "html" in ctype.lower() or _html(raw):
            hint = ". Is the base URL (--base-url / SHOU_BASE_URL) the API's root, e.g. https://host/v1?"
        return ModelResponseError(
            f"{self._where} answered HTTP {resp.status} with {ctype}, not {wanted}: {body}{hint}",
            status=resp.status,
        )


def _dumps(body: dict[str, Any]) -> bytes:
    """The request body as JSON: by orjson (~25x faster than json on a long conversation), else by json."""
    try:
        # copied to its length: orjson returns its whole buffer (4 KiB at least, up to ~10x a long text), and
        # the body is held until the reply comes (issue 35: 4 KiB of every 1 KiB request a parked call holds)
        return memoryview(orjson.dumps(body)).tobytes()
    except TypeError:  # what orjson refuses (integers beyond 64 bits, non-string keys, a lone surrogate)
        return json.dumps(well_formed(body), ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _loads(data: str | bytes) -> Any:
    """JSON by orjson, falling back to json for what only it takes (NaN, huge integers, a lone surrogate's
    escape: made U+FFFD here, as no UTF-8 can carry it on); `ValueError` if neither."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return well_formed(json.loads(data))


def _unframed(resp: Any) -> bool:
    """Whether a response body had neither a length nor chunks: it ends where the connection ends."""
    headers = resp.headers
    return "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", "").lower()


def _undecodable(e: BaseException) -> bool:
    """Whether a payload error is a body that could not be decompressed, rather than a cut connection."""
    seen: BaseException | None = e
    while seen is not None:
        if "ContentEncoding" in type(seen).__name__ or "decompress" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _int(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


def _html(raw: bytes) -> bool:
    """Whether a body begins like a web page (an event stream's lines never begin with `<`)."""
    return raw.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"<"


def _is_json_object(data: str) -> bool:
    return isinstance(_json_or_text(data), dict)


def _json_or_text(data: str) -> Any:
    try:
        return _loads(data)
    except ValueError:
        return data
