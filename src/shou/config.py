"""Settings from flags, environment, `.env` and `shou.toml`, and the provider presets.

Precedence, highest first: command-line flags, the process environment, the workspace's `.env`,
the workspace's `shou.toml`, the user's `shou.toml` (`$SHOU_CONFIG_DIR`, else `$XDG_CONFIG_HOME/shou`,
else `~/.config/shou`), then defaults. `Settings.sources` remembers where each value came from.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True, slots=True)
class Provider:
    """A known Chat Completions endpoint: where it lives and which variable holds its key."""

    name: str
    base_url: str
    key_env: str | None = None
    base_url_env: str | None = None
    default_model: str | None = None


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_BASE_URL", "gpt-4o-mini"),
        Provider("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", None, "deepseek-chat"),
        Provider("qwen", "https://dashscope.aliyuncs.com/compatible-mode/v1", "DASHSCOPE_API_KEY", None, "qwen-plus"),
        Provider("ollama", "http://localhost:11434/v1"),
        Provider("vllm", "http://localhost:8000/v1", "VLLM_API_KEY"),
        Provider("llamacpp", "http://localhost:8080/v1"),
        Provider("custom", ""),
    )
}

NO_MODEL_HELP = (
    "No model is configured. shou talks to any OpenAI-compatible Chat Completions endpoint: set a "
    "provider key such as OPENAI_API_KEY, DEEPSEEK_API_KEY or DASHSCOPE_API_KEY (in the environment, a "
    ".env file or shou.toml), or pick one explicitly with --model PROVIDER:MODEL (providers: openai, "
    "deepseek, qwen, ollama, vllm, llamacpp), e.g. `shou run --model deepseek:deepseek-chat \"...\"` or "
    "`shou run --model ollama:qwen2.5 \"...\"`; for any other server use --base-url URL --model NAME "
    "(SHOU_BASE_URL, SHOU_MODEL, SHOU_API_KEY). `shou config` shows what is set and where it came from."
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a run can be configured with. Build it with `load_settings()`."""

    model: str | None = None
    provider: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    workspace: Path = field(default_factory=Path.cwd)
    max_steps: int = 20
    run_timeout: float = 300.0
    tool_timeout: float = 30.0
    max_parallel_tools: int = 4
    stream: bool = True
    temperature: float | None = None
    tools: tuple[str, ...] | None = None
    sandbox: str = "auto"
    sandbox_timeout: float = 300.0
    sandbox_memory_mb: int = 512
    sandbox_network: bool = False
    vision: bool | None = None
    offline_fallback: bool = True
    local_threads: int = 1
    local_ctx: int = 4096
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    env: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def sandbox_limits(self) -> Any:
        """The sandbox `Limits` these settings ask for."""
        from .sandbox.base import Limits

        return Limits(timeout=self.sandbox_timeout, memory_mb=self.sandbox_memory_mb, network=self.sandbox_network)

    @property
    def state_dir(self) -> Path:
        """The workspace's `.shou/` folder (session store, outputs)."""
        return self.workspace / ".shou"


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A resolved model endpoint; `key_setting` names where the key comes from, for error messages."""

    provider: str
    model: str
    base_url: str
    api_key: str | None = field(repr=False)
    key_setting: str


_ENV = {
    "model": "SHOU_MODEL", "provider": "SHOU_PROVIDER", "base_url": "SHOU_BASE_URL", "api_key": "SHOU_API_KEY",
    "workspace": "SHOU_WORKSPACE", "max_steps": "SHOU_MAX_STEPS", "run_timeout": "SHOU_RUN_TIMEOUT",
    "tool_timeout": "SHOU_TOOL_TIMEOUT", "max_parallel_tools": "SHOU_MAX_PARALLEL_TOOLS", "stream": "SHOU_STREAM",
    "temperature": "SHOU_TEMPERATURE", "tools": "SHOU_TOOLS", "sandbox": "SHOU_SANDBOX",
    "sandbox_timeout": "SHOU_SANDBOX_TIMEOUT", "sandbox_memory_mb": "SHOU_SANDBOX_MEMORY_MB",
    "sandbox_network": "SHOU_SANDBOX_NETWORK", "vision": "SHOU_VISION",
    "offline_fallback": "SHOU_OFFLINE_FALLBACK", "local_threads": "SHOU_LOCAL_THREADS",
    "local_ctx": "SHOU_LOCAL_CTX",
}
SECRET_FIELDS = frozenset({"api_key"})
SANDBOX_BACKENDS = ("auto", "bubblewrap", "docker", "local")


def user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the user's `shou.toml` and chat history live."""
    env = os.environ if env is None else env
    if env.get("SHOU_CONFIG_DIR"):
        return Path(env["SHOU_CONFIG_DIR"])
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "shou"


def load_settings(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Merge every configuration source; `overrides` are the command-line flags (None values ignored)."""
    real_env = dict(os.environ if env is None else env)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def take(layer: Mapping[str, Any], source: str) -> None:
        for key, raw in layer.items():
            values[key] = _convert(key, raw, source)
            sources[key] = source

    workspace = Path(flags.get("workspace") or real_env.get("SHOU_WORKSPACE") or Path.cwd()).expanduser().resolve()
    user_toml = user_config_dir(real_env) / "shou.toml"
    take(_read_toml(user_toml), str(user_toml))
    ws_toml = workspace / "shou.toml"
    take(_read_toml(ws_toml), str(ws_toml))
    dotenv: dict[str, str] = {}
    dotenv_path = workspace / ".env"
    if dotenv_path.is_file():
        from dotenv import dotenv_values

        dotenv = {k: v for k, v in dotenv_values(dotenv_path).items() if v is not None and k not in real_env}
        take({k: dotenv[e] for k, e in _ENV.items() if e in dotenv}, str(dotenv_path))
    take({k: real_env[e] for k, e in _ENV.items() if e in real_env and k != "workspace"}, "environment")
    take({k: v for k, v in flags.items() if k != "workspace"}, "flag")
    values["workspace"] = workspace
    if "workspace" in flags or "SHOU_WORKSPACE" in real_env:
        sources["workspace"] = "flag" if "workspace" in flags else "environment"
    return Settings(**values, sources=sources, env={**dotenv, **real_env})


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None
    known = {f.name for f in fields(Settings)} - {"sources", "env", "workspace"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return data


def _convert(key: str, raw: Any, source: str) -> Any:
    try:
        if key in ("max_steps", "max_parallel_tools", "sandbox_memory_mb", "local_threads", "local_ctx"):
            value = int(raw)
            if value < 1:
                raise ValueError("must be at least 1")
            return value
        if key in ("run_timeout", "tool_timeout", "temperature", "sandbox_timeout"):
            value = float(raw)
            if key != "temperature" and value <= 0:
                raise ValueError("must be positive")
            return value
        if key in ("stream", "sandbox_network", "vision", "offline_fallback"):
            if isinstance(raw, bool):
                return raw
            return str(raw).strip().lower() not in ("0", "false", "no", "off")
        if key == "tools":
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(s.strip() for s in items if s.strip())
        if key == "workspace":
            return Path(raw)
        if key == "sandbox" and raw not in SANDBOX_BACKENDS:
            raise ValueError(f"choose one of {', '.join(SANDBOX_BACKENDS)}")
        return str(raw) if raw is not None else None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"setting {key!r} from {source} is invalid ({raw!r}): {e}") from None


def resolve_model(settings: Settings) -> ModelConfig:
    """Work out provider, model, base URL and key; raises `ConfigError` saying what to set."""
    env = settings.env
    model = settings.model
    provider = settings.provider
    if model and ":" in model and model.split(":", 1)[0] in PROVIDERS:
        prefix, model = model.split(":", 1)
        provider = provider or prefix
    if provider is None:
        if settings.base_url:
            provider = "custom"
        else:
            provider = next(
                (p.name for p in PROVIDERS.values() if p.key_env and p.default_model and env.get(p.key_env)),
                None,
            )
            if provider is None and (settings.api_key or model):
                provider = "openai"
    if provider is None:
        raise ConfigError(NO_MODEL_HELP)
    preset = PROVIDERS.get(provider)
    if preset is None:
        raise ConfigError(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
    base_url = settings.base_url or (preset.base_url_env and env.get(preset.base_url_env)) or preset.base_url
    if not base_url:
        raise ConfigError("provider 'custom' needs a base URL: set --base-url or SHOU_BASE_URL")
    model = model or preset.default_model
    if not model:
        raise ConfigError(f"provider {provider!r} has no default model: set --model or SHOU_MODEL")
    key_setting = "SHOU_API_KEY" if settings.api_key or not preset.key_env else preset.key_env
    api_key = settings.api_key or (env.get(preset.key_env) if preset.key_env else None)
    if not api_key and preset.key_env and preset.default_model and base_url == preset.base_url:
        raise ConfigError(
            f"provider {provider!r} needs an API key: set {preset.key_env} (or SHOU_API_KEY) in the "
            "environment, a .env file or shou.toml"
        )
    return ModelConfig(provider, model, base_url.rstrip("/"), api_key, key_setting)


def mask(secret: str | None) -> str:
    """Show a secret as its first 3 and last 4 characters."""
    if not secret:
        return "(not set)"
    if len(secret) <= 10:
        return "****"
    return f"{secret[:3]}…{secret[-4:]}"


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """Rows of (setting, shown value, source) for `shou config`; secrets masked."""
    rows = []
    for f in fields(settings):
        if f.name in ("sources", "env"):
            continue
        value = getattr(settings, f.name)
        shown = mask(value) if f.name in SECRET_FIELDS else ("" if value is None else str(value))
        if isinstance(value, tuple):
            shown = ",".join(value)
        rows.append((f.name, shown, settings.sources.get(f.name, "default")))
    return rows


def with_overrides(settings: Settings, **changes: Any) -> Settings:
    """A copy of `settings` with some fields changed (marked as coming from flags)."""
    sources = {**settings.sources, **{k: "flag" for k in changes}}
    return replace(settings, **changes, sources=sources)
