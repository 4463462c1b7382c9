"""Token counting (tiktoken encodings, cached per message) and context windows of known models.

tiktoken downloads its encoding files on first use, which fails offline; the `bpe-openai` package ships
the same files, so shou seeds tiktoken's cache from it. Without either, a length estimate is used.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..messages import Message

# Prefix -> window in tokens. The first matching prefix wins, so longer prefixes come first.
CONTEXT_WINDOWS: list[tuple[str, int]] = [
    ("gpt-4.1", 1_047_576), ("gpt-4o", 128_000), ("gpt-4-turbo", 128_000), ("gpt-4", 8_192),
    ("gpt-3.5", 16_385), ("gpt-5", 400_000), ("o1", 200_000), ("o3", 200_000), ("o4", 200_000),
    ("deepseek-chat", 128_000), ("deepseek-reasoner", 128_000), ("deepseek", 64_000),
    ("qwen-turbo", 1_000_000), ("qwen-plus", 131_072), ("qwen-max", 32_768), ("qwen2.5", 32_768),
    ("qwen3", 40_960), ("qwen", 32_768), ("llama3.1", 131_072), ("llama3.2", 131_072), ("llama3", 8_192),
    ("mistral", 32_768), ("gemma", 8_192), ("smollm", 8_192),
]
DEFAULT_WINDOW = 32_768
# What the chat format adds around each message (role, separators), per OpenAI's published recipe.
PER_MESSAGE = 4
PER_IMAGE = 765  # a 1024x1024 image at high detail; low detail costs 85


def context_window(model: str, override: int | None = None) -> int:
    """The context window of `model` (a provider prefix like `deepseek:` is ignored)."""
    if override:
        return override
    name = model.split(":", 1)[-1].lower() if ":" in model else model.lower()
    for prefix, window in CONTEXT_WINDOWS:
        if name.startswith(prefix):
            return window
    return DEFAULT_WINDOW


def encoding_name(model: str) -> str:
    """The tiktoken encoding for `model`: o200k for OpenAI's newer models, cl100k for the rest."""
    name = model.split(":", 1)[-1].lower()
    return "o200k_base" if name.startswith(("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4")) else "cl100k_base"


@functools.cache
def get_encoder(name: str = "cl100k_base") -> Callable[[str], int]:
    """A function counting the tokens of a text in encoding `name`."""
    try:
        import tiktoken
    except ImportError:
        return _estimate
    try:
        _seed_tiktoken_cache(name)
        enc = tiktoken.get_encoding(name)
    except Exception:  # offline and not seedable: estimate rather than fail a run
        return _estimate
    return lambda text: len(enc.encode(text, disallowed_special=()))


def _seed_tiktoken_cache(name: str) -> None:
    """Put `bpe-openai`'s copy of the encoding where tiktoken looks for its download."""
    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "data-gym-cache")
    target = Path(cache) / hashlib.sha1(url.encode()).hexdigest()
    if target.exists():
        return
    # find_spec locates the package without importing it (its import is slow and loads every encoding).
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        return
    source = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
    if source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(gzip.decompress(source.read_bytes()))
        tmp.replace(target)  # atomic: a concurrent reader never sees half a file


def _estimate(text: str) -> int:
    # About four characters a token for English; CJK runs closer to one a character.
    wide = sum(1 for ch in text if ord(ch) > 0x2E80)
    return (len(text) - wide) // 4 + wide + 1


class TokenCounter:
    """Counts tokens of messages for one model, caching each message's count."""

    __slots__ = ("_cache", "_encode", "model")

    def __init__(self, model: str = "") -> None:
        self.model = model
        self._encode = get_encoder(encoding_name(model))
        self._cache: dict[Message, int] = {}

    def text(self, text: str) -> int:
        """Tokens in a plain text."""
        return self._encode(text) if text else 0

    def message(self, m: Message) -> int:
        """Tokens one message costs in a request (content, tool calls, images, framing)."""
        cached = self._cache.get(m)
        if cached is not None:
            return cached
        n = PER_MESSAGE + self.text(m.text) + PER_IMAGE * len(m.images)
        for call in m.tool_calls:
            n += 3 + self.text(call.name) + self.text(call.arguments)
        if len(self._cache) > 20_000:
            self._cache.clear()
        self._cache[m] = n
        return n

    def messages(self, ms: list[Message]) -> int:
        """Tokens of a whole request's messages."""
        return sum(self.message(m) for m in ms) + 3  # every reply is primed with a few tokens
