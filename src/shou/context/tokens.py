"""Token counting (tiktoken encodings, cached per message) and context windows of known models.

tiktoken downloads its encoding files on first use, which fails offline. shou ships the two it uses in
`encodings/` (OpenAI's files, MIT licence, rewritten by scripts/make_encodings.py after checking them
against tiktoken's published SHA-256, into a form that loads in a sixth of the time) and builds the
encodings from them, writing nothing anywhere. Without tiktoken, a length estimate is used.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import marshal
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..messages import Message

# Prefix -> window in tokens. The first matching prefix wins, so longer prefixes come first.
CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576), ("gpt-4o", 128_000), ("gpt-4-turbo", 128_000), ("gpt-4", 8_192),
    ("gpt-3.5", 16_385), ("gpt-5", 400_000), ("o1", 200_000), ("o3", 200_000), ("o4", 200_000),
    ("deepseek-chat", 128_000), ("deepseek-reasoner", 128_000), ("deepseek", 64_000),
    ("qwen-turbo", 1_000_000), ("qwen-plus", 131_072), ("qwen-max", 32_768), ("qwen2.5", 32_768),
    ("qwen3", 40_960), ("qwen", 32_768), ("llama3.1", 131_072), ("llama3.2", 131_072), ("llama3", 8_192),
    ("mistral", 32_768), ("gemma", 8_192), ("smollm", 8_192),
)
DEFAULT_WINDOW = 32_768
# What the chat format adds around each message (role, separators), per OpenAI's published recipe.
PER_MESSAGE = 4
PER_IMAGE = 765  # a 1024x1024 image at high detail; low detail costs 85


def context_window(model: str, override: int | None = None,
                   models: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """The context window of `model` (a provider prefix like `deepseek:` is ignored): `override`, else the
    `context_window` of its `[models."NAME"]` table in shou.toml (`models`), else the known windows' table,
    else `DEFAULT_WINDOW`."""
    if override:
        return override
    name = model.split(":", 1)[-1].lower() if ":" in model else model.lower()
    for key, entry in (models or {}).items():
        if str(key).lower() in (model.lower(), name) and isinstance(entry, Mapping) and entry.get("context_window"):
            return int(entry["context_window"])
    return _known_window(name)


@functools.lru_cache(maxsize=256)
def _known_window(name: str) -> int:
    """The known windows' table's entry for `name` (every run asks; a model has a handful of names)."""
    for prefix, window in CONTEXT_WINDOWS:
        if name.startswith(prefix):
            return window
    return DEFAULT_WINDOW


def encoding_name(model: str) -> str:
    """The tiktoken encoding for `model`: o200k for OpenAI's newer models, cl100k for the rest."""
    name = model.split(":", 1)[-1].lower()
    return "o200k_base" if name.startswith(("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4")) else "cl100k_base"


# What tiktoken_ext.openai_public declares for each encoding besides its ranks (the split pattern, the
# special tokens), and the SHA-256 of the shipped rank file.
_ENCODINGS: dict[str, tuple[str, dict[str, int], str]] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
        r"""\s+(?!\S)|\s""",
        {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
         "<|endofprompt|>": 100276},
        "9b2f5c7eb4677191e73e80b09306b166ec1b4f18c0dadd7c2a5a921d5c20f803",
    ),
    "o200k_base": (
        "|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        "908e97d4505e390d828457d6ed3ae44a87fd5a8e70d739d64d4b36f9d4d7c9ab",
    ),
}


_encoders: dict[str, Callable[[str], int]] = {}
_encoders_lock = threading.Lock()


def get_encoder(name: str = "cl100k_base") -> Callable[[str], int]:
    """A function counting the tokens of a text in encoding `name` (built once per process)."""
    with _encoders_lock:  # one build, even when a prefetch thread is already at it
        found = _encoders.get(name)
        if found is None:
            try:
                found = _encoders[name] = _counter(load_encoding(name), name)
            except Exception:  # no tiktoken, or a damaged install: estimate rather than fail a run
                found = _encoders[name] = _estimate
        return found


# The encodings' split patterns as they read on ASCII text, for Python's `re` (3.11: possessive quantifiers).
# On ASCII, \p{L} is [A-Za-z], \p{N} is [0-9], the Lu/Ll classes are [A-Z]/[a-z] (no ASCII character is Lt, Lm,
# Lo or M), Unicode's \s is these six characters (Python's `\s` would also take \x1c-\x1f), and the Rust
# regex's `$` is the end of the text (Python's `\Z`; its `$` also matches before a final newline).
_S, _NS = r"[\t\n\x0b\x0c\r ]", r"[^\t\n\x0b\x0c\r ]"
_ASCII_SPLIT: dict[str, str] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+| ?[^\t\n\x0b\x0c\r A-Za-z0-9]++[\r\n]*+|"""
        rf"""{_S}++\Z|{_S}*[\r\n]|{_S}+(?!{_NS})|{_S}"""
    ),
    "o200k_base": "|".join([
        r"""[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[0-9]{1,3}""",
        r""" ?[^\t\n\x0b\x0c\r A-Za-z0-9]+[\r\n/]*""",
        rf"""{_S}*[\r\n]+""",
        rf"""{_S}+(?!{_NS})""",
        rf"""{_S}+""",
    ]),
}
MOST_PIECES = 50_000  # pieces whose token counts a counter remembers (a few MB at most)


def _counter(enc: Any, name: str) -> Callable[[str], int]:
    """Counts tokens as `len(enc.encode(text, disallowed_special=()))` does. tiktoken splits a text with a Rust
    regex (`fancy_regex`: ~1,800 instructions a character) before its byte-pair merges; an ASCII text is split
    here by the same pattern in Python's `re` (~750), and the pieces, mostly words and numbers seen before, are
    counted from a table, a piece not in it by tiktoken's own merges of that one piece. Any other text, or a
    tiktoken without that call, is counted by tiktoken (`tests/unit/test_token_split.py` checks both agree)."""
    slow: Callable[[str], list[int]] = enc.encode_ordinary  # tiktoken's `encode` with no special tokens
    merge = getattr(getattr(enc, "_core_bpe", None), "encode_single_piece", None)
    pattern = _ASCII_SPLIT.get(name)
    if merge is None or pattern is None:
        return lambda text: len(slow(text))
    split = re.compile(pattern).findall
    known: dict[str, int] = {}
    count_of = known.__getitem__

    def count(text: str) -> int:
        if not text.isascii():
            return len(slow(text))
        pieces = split(text)
        try:
            return sum(map(count_of, pieces))
        except KeyError:  # a piece not seen before: merged once
            pass
        n = 0
        for piece in pieces:
            c = known.get(piece)
            if c is None:
                if len(known) >= MOST_PIECES:
                    known.clear()
                c = known[piece] = len(merge(piece.encode("ascii")))
            n += c
        return n

    return count


def prefetch_encoder(model: str) -> None:
    """Start building `model`'s encoder in a background thread, so the first count does not wait for it all."""
    threading.Thread(target=get_encoder, args=(encoding_name(model),), name="shou-tokens", daemon=True).start()


def load_encoding(name: str) -> Any:
    """The tiktoken `Encoding` `name` built from the files shou ships (no download, no cache written)."""
    import tiktoken

    pattern, special, digest = _ENCODINGS[name]
    blob = gzip.decompress((Path(__file__).parent / "encodings" / f"{name}.ranks.gz").read_bytes())
    if hashlib.sha256(blob).hexdigest() != digest:
        raise ValueError(f"the {name} encoding file is damaged (its SHA-256 does not match)")
    # The tokens in rank order, a marshalled list of bytes (scripts/make_encodings.py); only read once the
    # SHA-256 above says they are the bytes shou shipped.
    tokens = marshal.loads(blob)
    ranks = dict(zip(tokens, range(len(tokens)), strict=True))
    return tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)


def _estimate(text: str) -> int:
    # About four characters a token for English; CJK runs closer to one a character.
    wide = sum(1 for ch in text if ord(ch) > 0x2E80)
    return (len(text) - wide) // 4 + wide + 1


LONG_TEXT = 2048  # characters from which a text is remembered apart, by size
MOST_LONG_CHARS = 8 << 20  # characters of long texts a counter remembers


class TokenCounter:
    """Counts tokens of messages for one model, caching each message's count."""

    __slots__ = ("_big", "_big_chars", "_encode", "_ids", "_specs", "_texts", "model")

    def __init__(self, model: str = "") -> None:
        self.model = model
        self._encode = get_encoder(encoding_name(model))
        self._ids: dict[int, tuple[Message, int]] = {}
        self._texts: dict[str, int] = {}  # short texts counted before (tool names, short arguments and results)
        # Long texts apart (a session's system text, big results): the churn of many short ones must not make a
        # long one be encoded again at every step, nor may 1,024 of them, each up to a request's size, be kept.
        self._big: dict[str, int] = {}
        self._big_chars = 0
        self._specs: dict[tuple[int, ...], tuple[list[dict[str, Any]], int]] = {}

    def text(self, text: str) -> int:
        """Tokens in a plain text, remembered: what a run counts comes back, in the next steps (the system text),
        and across runs (tool names, short arguments and results, answers); a miss costs a dict entry, an
        encode is tens of thousands of instructions. At most 1,024 short texts and 8 M characters of long ones
        are kept, each kind forgotten together when full."""
        n = self._texts.get(text)
        if n is None:
            if not text:
                return 0
            if len(text) >= LONG_TEXT:
                return self._long(text)
            if len(self._texts) > 1024:
                self._texts.clear()
            n = self._texts[text] = self._encode(text)
        return n

    def _long(self, text: str) -> int:
        n = self._big.get(text)
        if n is None:
            n = self._encode(text)
            if len(text) <= MOST_LONG_CHARS:  # one bigger is counted each time it is asked for
                if self._big_chars + len(text) > MOST_LONG_CHARS:
                    self._big.clear()
                    self._big_chars = 0
                self._big[text] = n
                self._big_chars += len(text)
        return n

    def specs(self, specs: list[dict[str, Any]]) -> int:
        """Tokens of the tool specs offered in a request (as their JSON). A tool builds its spec once, so the
        same dicts come back in every run: counted by identity, without making their JSON again."""
        key = tuple(map(id, specs))
        seen = self._specs.get(key)
        if seen is not None:
            return seen[1]
        if len(self._specs) > 256:
            self._specs.clear()
        n = self.text(json.dumps(specs))
        self._specs[key] = (list(specs), n)  # the specs are kept, so their ids cannot name others
        return n

    def message(self, m: Message) -> int:
        """Tokens one message costs in a request (content, tool calls, images, framing)."""
        seen = self._ids.get(id(m))  # by identity: a history's messages are the same objects at every step
        if seen is not None and seen[0] is m:
            return seen[1]
        # An equal message made again (the system message, each request) costs what its texts cost, and those are
        # remembered by `text()`: no second table by value, whose lookups hashed every field of the message.
        n = PER_MESSAGE + self.text(m.text) + PER_IMAGE * len(m.images)
        for call in m.tool_calls:
            n += 3 + self.text(call.name) + self.text(call.arguments)
        if m.role != "system":  # made again for every request: remembered by its text, not by its identity
            self._remember(m, n)
        return n

    def _remember(self, m: Message, n: int) -> None:
        if len(self._ids) > 20_000:
            self._ids.clear()
        self._ids[id(m)] = (m, n)  # the message is kept, so its id cannot name another one

    def messages(self, ms: list[Message]) -> int:
        """Tokens of a whole request's messages."""
        return sum(self.message(m) for m in ms) + 3  # every reply is primed with a few tokens
