"""What known models can do: whether they accept images."""

from __future__ import annotations

# Name prefixes (after any `provider:`) of models that take image content parts.
VISION_PREFIXES = (
    "gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-4-vision", "gpt-5", "o1", "o3", "o4", "chatgpt-4o",
    "qwen-vl", "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qvq", "qwen-omni", "llava", "bakllava", "llama3.2-vision",
    "minicpm-v", "gemma3", "moondream", "pixtral", "claude-3", "claude-sonnet", "claude-opus", "gemini",
)


def supports_vision(model: str) -> bool:
    """Whether `model` (e.g. `openai:gpt-4o-mini`) is known to accept images; unknown models are not."""
    name = model.split(":", 1)[1] if ":" in model else model
    return name.lower().startswith(VISION_PREFIXES)
