"""What known models can do: whether they accept images, and how they can be held to a JSON schema."""

from __future__ import annotations

from typing import Any, Literal

# Name prefixes (after any `provider:`) of models that take image content parts.
VISION_PREFIXES = (
    "gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-4-vision", "gpt-5", "o1", "o3", "o4", "chatgpt-4o",
    "qwen-vl", "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qvq", "qwen-omni", "llava", "bakllava", "llama3.2-vision",
    "minicpm-v", "gemma3", "moondream", "pixtral", "claude-3", "claude-sonnet", "claude-opus", "gemini",
)
# Name prefixes of models whose provider takes `response_format: {"type": "json_schema", ...}` (structured
# output). Others (DeepSeek has only `json_object`, most local servers vary) get the answer as a tool call.
RESPONSE_FORMAT_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "qwen-plus", "qwen-max",
                            "qwen-turbo", "qwen3", "gemini")
OutputMode = Literal["response_format", "grammar", "tool"]


def supports_vision(model: str) -> bool:
    """Whether `model` (e.g. `openai:gpt-4o-mini`) is known to accept images; unknown models are not."""
    name = model.split(":", 1)[1] if ":" in model else model
    return name.lower().startswith(VISION_PREFIXES)


def supports_response_format(model: str) -> bool:
    """Whether `model` (e.g. `openai:gpt-4o-mini`) is known to take a `json_schema` response format."""
    name = model.split(":", 1)[1] if ":" in model else model
    return name.lower().startswith(RESPONSE_FORMAT_PREFIXES)


def output_mode(model: Any) -> OutputMode:
    """How `model` is held to a JSON schema for a typed answer: the provider's structured-output mode
    (`response_format`), a grammar (the local model, given the same setting), or a final tool call.

    A backend says it with its `output_mode` attribute (the wire client's `response_format` option sets it);
    a wrapper (the response cache) asks what it wraps; a fallback chain uses `response_format` only when
    every model of it takes it, so a fallback never gets a request its provider refuses.
    """
    mode = getattr(model, "output_mode", None)
    if mode in ("response_format", "grammar", "tool"):
        return mode  # type: ignore[no-any-return]
    inner = getattr(model, "inner", None)
    if inner is not None:
        return output_mode(inner)
    chain = getattr(model, "models", None)
    if isinstance(chain, tuple) and chain:
        modes = {output_mode(m) for m in chain}
        return modes.pop() if len(modes) == 1 else "tool"
    name = getattr(model, "name", "")
    return "response_format" if isinstance(name, str) and supports_response_format(name) else "tool"
