"""Settings from flags, environment, `.env` and `shou.toml`, and the provider presets.

Precedence, highest first: command-line flags, the process environment, the workspace's `.env`,
the workspace's `shou.toml`, the user's `shou.toml` (`$SHOU_CONFIG_DIR`, else `$XDG_CONFIG_HOME/shou`,
else `~/.config/shou`), then defaults. `Settings.sources` remembers where each value came from.

The workspace's two files are untrusted until a person trusts their exact content (`shou trust`, see
`shou.trust`). Until then only the settings in `SAFE_SETTINGS` apply from them, the ones in `NARROWING`
may only tighten what the trusted sources allow, and everything else (provider, base URLs, keys, the
sandbox backend, allow-lists, and any setting added later unless it is declared here) is ignored and
listed in `Settings.ignored`, so the command line can say so.
"""

from __future__ import annotations

import io
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .setting_tables import TABLES
from .settings import SANDBOX_BACKENDS, SECRET_FIELDS, Settings, convert, env_names, setting_fields
from .trust import TrustStore, read_config_file

__all__ = [
    "NARROWING", "NO_MODEL_HELP", "PROVIDERS", "SAFE_SETTINGS", "SANDBOX_BACKENDS", "SECRET_FIELDS", "ModelConfig",
    "Provider", "Settings", "describe", "load_settings", "mask", "redact_urls", "resolve_model", "user_config_dir",
    "with_overrides",
]


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
class Ignored:
    """Settings an untrusted workspace file asked for and did not get (names only, never values)."""

    path: Path
    names: tuple[str, ...]
    reason: str = "untrusted"

    def message(self) -> str:
        """One line for the person: what was ignored and how to change that."""
        if self.reason != "untrusted":
            return f"ignored {self.path}: {self.reason}"
        # Names come from the file: one with control characters could rewrite the person's terminal.
        names = ", ".join(n if n.isprintable() else repr(n) for n in self.names)
        return (f"{self.path} is not trusted, so its settings {names} were ignored (harmless "
                f"ones apply, and lower limits such as max_steps). Review the file, then run `shou trust` in "
                f"{self.path.parent} to use them.")


# What an untrusted workspace file may set (declared `safe` in settings.py): cannot run code, move a secret or
# weaken isolation.
SAFE_SETTINGS = frozenset(name for name, f in setting_fields().items() if f.metadata.get("safe"))


def _fewer_tools(trusted: tuple[str, ...] | None, asked: tuple[str, ...]) -> tuple[str, ...]:
    return asked if trusted is None else tuple(t for t in trusted if t in asked)


# Narrowing: an untrusted value only counts as far as it tightens the trusted one.
def _more_rules(trusted: tuple[str, ...], asked: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*trusted, *asked)))


# Lists of permission rules add up across sources (the user's and a trusted workspace's), never replace.
MERGED = frozenset({"permissions_allow", "permissions_ask", "permissions_deny"})

def _tighter(trusted: Any, asked: Any) -> Any:
    """The lower of two limits, where None means no limit."""
    return asked if trusted is None else trusted if asked is None else min(trusted, asked)


NARROWING: dict[str, Callable[[Any, Any], Any]] = {
    "tools": _fewer_tools,
    # A budget or rate limit an untrusted workspace sets may only be lower than the trusted one.
    "token_budget": _tighter,
    "max_cost": _tighter,
    "session_token_budget": _tighter,
    "session_max_cost": _tighter,
    "rpm": _tighter,
    "tpm": _tighter,
    # More rules that ask or deny only ever take away: an untrusted workspace may add them.
    "permissions_ask": _more_rules,
    "permissions_deny": _more_rules,
    "sandbox_timeout": min,
    "sandbox_memory_mb": min,
    "sandbox_disk_mb": min,
    "sandbox_network": lambda trusted, asked: trusted and asked,
    # How much of the machine one run takes at once (parallel sandboxes, the local model's threads and memory).
    "max_parallel_tools": min,
    "local_threads": min,
    "local_ctx": min,
    # How much one run may do, spend and wait: an untrusted workspace may lower these, never raise them.
    "max_steps": min,
    "run_timeout": min,
    "tool_timeout": min,
    "max_tokens": _tighter,
    "plan_step_max_steps": min,
    "plan_step_timeout": min,
    "max_replans": min,
    "max_reviews": min,
    "output_retries": min,
    "web_timeout": min,
    "browser_timeout": min,
    "delegation": lambda trusted, asked: trusted and asked,
    # An alert may be made more sensitive (a lower share), never quieter.
    "alert_threshold": min,
}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A resolved model endpoint; `key_setting` names where the key comes from, for error messages."""

    provider: str
    model: str
    base_url: str
    api_key: str | None = field(repr=False)
    key_setting: str


_ENV = env_names()


def user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the user's `shou.toml` and chat history live."""
    env = os.environ if env is None else env
    if env.get("SHOU_CONFIG_DIR"):
        return Path(env["SHOU_CONFIG_DIR"])
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "shou"


def make_user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """`user_config_dir()`, made 0700 if missing (tightened if not): it holds keys, approvals and the chat
    history. The one place that makes it."""
    from .private import user_folder

    return user_folder(user_config_dir(env))


def load_settings(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Merge every configuration source; `overrides` are the command-line flags (None values ignored)."""
    real_env = dict(os.environ if env is None else env)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    ignored: list[Ignored] = []
    defaults = Settings()

    def take(layer: Mapping[str, Any], source: str, trusted: bool = True, base: Path | None = None) -> None:
        refused = []
        for key, raw in layer.items():
            value = _tables_checked(key, convert(key, raw, source), source, base)
            if not trusted and not _harmless(key, value):
                if key == "guardrails":  # checks only add up; code and models come from trusted sources only
                    value, dropped = _added_checks(values.get(key, {}), value)
                    refused.extend(f"guardrails.{name}" for name in dropped)
                elif key not in NARROWING:
                    refused.append(key)
                    continue
                else:
                    value = NARROWING[key](values.get(key, getattr(defaults, key)), value)
            if key in MERGED and key in values:
                value = _more_rules(values[key], value)
            elif key == "models" and key in values:  # price tables add up; a later source's entry wins
                value = {**values[key], **{n: {**values[key].get(n, {}), **p} for n, p in value.items()}}
            elif key in TABLES and key in values:  # tables add up; a later one replaces one of its name
                value = {**values[key], **value}
            values[key] = value
            sources[key] = source
        if refused:
            ignored.append(Ignored(Path(source), tuple(refused)))

    workspace = Path(flags.get("workspace") or real_env.get("SHOU_WORKSPACE") or Path.cwd()).expanduser().resolve()
    config_dir = user_config_dir(real_env)
    user_toml = config_dir / "shou.toml"
    take(_read_toml(user_toml, _read_user_file(user_toml)), str(user_toml), base=config_dir)
    trust = TrustStore(config_dir)
    ws_toml = workspace / "shou.toml"
    data, trusted = _workspace_file(ws_toml, trust, ignored)
    take(_read_toml(ws_toml, data), str(ws_toml), trusted, base=workspace)
    dotenv: dict[str, str] = {}
    dotenv_path = workspace / ".env"
    data, trusted = _workspace_file(dotenv_path, trust, ignored)
    if data is not None:
        from dotenv import dotenv_values

        # ${VAR} expansion would let an untrusted file copy a secret of the environment into a harmless setting.
        parsed = dotenv_values(stream=io.StringIO(data.decode("utf-8", "replace")), interpolate=trusted)
        dotenv = {k: v for k, v in parsed.items() if v is not None and k not in real_env}
        take({k: dotenv[e] for k, e in _ENV.items() if e in dotenv}, str(dotenv_path), trusted, base=workspace)
        if not trusted:
            # Its other variables are provider keys, base URLs and the like: none of them is harmless.
            others = sorted(k for k in dotenv if k not in _ENV.values())
            if others:
                _merge_ignored(ignored, Path(dotenv_path), others)
            dotenv = {}
    take({k: real_env[e] for k, e in _ENV.items() if e in real_env and k != "workspace"}, "environment")
    take({k: v for k, v in flags.items() if k != "workspace"}, "flag")
    values["workspace"] = workspace
    if "workspace" in flags or "SHOU_WORKSPACE" in real_env:
        sources["workspace"] = "flag" if "workspace" in flags else "environment"
    return Settings(**values, sources=sources, env={**dotenv, **real_env}, ignored=tuple(ignored))


def _priced(tables: Mapping[str, Mapping[str, float]], source: str) -> None:
    """A model given prices needs both of input and output, unless shou has built-in ones for it (which
    settings cannot know: they are shou.pricing's)."""
    from .pricing import DEFAULT_PRICES

    for name, values in tables.items():
        prices = set(values) - {"context_window"}
        if prices and name not in DEFAULT_PRICES and not {"input_price", "output_price"} <= prices:
            raise ConfigError(f"setting 'models' from {source} is invalid ('a table'): [models.\"{name}\"] needs "
                              "input_price and output_price (USD per million tokens)")


def _tables_checked(key: str, value: Any, source: str, base: Path | None) -> Any:
    """A setting's value with what its tables need of their source: prices checked, guardrail files anchored."""
    if key == "models":
        _priced(value, source)
    elif key == "guardrails":
        value = _anchored(value, base, source)
    return value


def _anchored(tables: dict[str, dict[str, Any]], base: Path | None, source: str) -> dict[str, dict[str, Any]]:
    """`[guardrails]` tables with each relative `file.py:function` made absolute against `base`, the folder of the
    file that names it: the user config's file is in the user config folder, never in whatever workspace the
    run starts in (an untrusted one could plant it and have the person's own config import it). A source with
    no folder (the environment, a flag) must give an absolute path."""
    out = {}
    for name, table in tables.items():
        ref = table.get("function")
        if isinstance(ref, str) and ":" in ref:
            where, _, attr = ref.rpartition(":")
            path = Path(where.strip()).expanduser()
            if where.strip().endswith(".py") and not path.is_absolute():
                if base is None:
                    raise ConfigError(f"setting 'guardrails' from {source}: [guardrails.{name}] function {ref!r}: "
                                      "give the file's absolute path")
                table = {**table, "function": f"{base / path}:{attr.strip()}"}
        out[name] = table
    return out


def _added_checks(trusted: dict[str, dict[str, Any]], asked: dict[str, dict[str, Any]]
                  ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The guardrails with an untrusted file's added (the trusted ones first and unchanged), and the names of
    its checks left out: a function (importing it runs the file's code), one naming its own model (a model comes
    only from a trusted source), and one reusing a trusted check's name (which would replace, so remove, it).
    A rule judged by the agent's model only ever stops more runs, so an untrusted workspace may add one."""
    added = dict(trusted)
    dropped = []
    for name, table in asked.items():
        if "function" in table or "model" in table or name in trusted:
            dropped.append(name)
        else:
            added[name] = table
    return added, dropped


def _harmless(key: str, value: Any) -> bool:
    # Not the model either, even a bare name: it decides what every call costs (and a provider prefix or a
    # local file where requests go or what runs).
    return key in SAFE_SETTINGS


def _merge_ignored(ignored: list[Ignored], path: Path, names: list[str]) -> None:
    for i, entry in enumerate(ignored):
        if entry.path == path:
            ignored[i] = Ignored(path, (*entry.names, *names))
            return
    ignored.append(Ignored(path, tuple(names)))


def _workspace_file(path: Path, trust: TrustStore, ignored: list[Ignored]) -> tuple[bytes | None, bool]:
    """A workspace config file's bytes and whether a person trusted exactly them."""
    try:
        data = read_config_file(path)
    except ConfigError as e:  # a link or a FIFO where a settings file should be: leave it out, say so
        ignored.append(Ignored(path, (), str(e)))
        return None, False
    if data is None:
        return None, False
    return data, trust.is_trusted(path, data)


def _read_user_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"{path} cannot be read: {e.strerror or e}") from None


def _read_toml(path: Path, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {}
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None
    permissions = parsed.pop("permissions", None)
    if permissions is not None:  # [permissions] allow/ask/deny are the settings permissions_allow/...
        if not isinstance(permissions, dict) or set(permissions) - {"allow", "ask", "deny"}:
            raise ConfigError(f"{path}: [permissions] takes allow, ask and deny, each a list of rules")
        for outcome, rules in permissions.items():
            parsed[f"permissions_{outcome}"] = rules
    known = set(setting_fields()) - {"workspace"}
    unknown = sorted(set(parsed) - known)
    if unknown:
        shown = ", ".join(k if k.isprintable() else repr(k) for k in unknown)  # names from the file: no escapes
        raise ConfigError(f"{path}: unknown setting(s) {shown}; known: {', '.join(sorted(known))}")
    return parsed


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


# The userinfo runs to the last "@" before the path ("user:p@ss@host"); key-like query values go too.
# userinfo runs to the last @ before whitespace or a quote: a password with an unencoded / ? # is masked too
# (a path with an @ in it is masked with it: the safe side)
_URL_SECRETS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s'\"<>]*@|([?&][^=&#\s]*(?:key|token|secret|sig|password)"
                          r"[^=&#\s]*=)[^&#\s]+")


def redact_urls(text: str) -> str:
    """`text` with the credentials URLs may carry (`user:key@host`, `?api-key=...`) masked."""
    return _URL_SECRETS.sub(lambda m: f"{m.group(1)}***@" if m.group(1) else f"{m.group(2)}***", text)


def shown_url(url: str, text: str | None = None) -> str:
    """A URL shou sends to (a base URL, a webhook) as it is shown: `redact_urls`, and what `url_secrets(url,
    sent=True)` finds in it besides (key-like path parts, the fragment) as `***`. With `text`: that text (an
    error that may quote the URL) so masked."""
    from .redact import url_secrets

    shown = redact_urls(url if text is None else text)
    for secret in sorted(url_secrets(url, sent=True), key=len, reverse=True):
        if len(secret) >= 8:
            shown = shown.replace(secret, "***")
    return shown


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """Rows of (setting, shown value, source) for `shou config`; secrets masked."""
    from .known_secrets import secrets_of
    from .redact import Redactor

    # Every value passes the redactor too: a setting such as `mcp_servers` holds keys in its tables.
    hide = Redactor(secrets_of(settings)).text
    rows = []
    for f in setting_fields().values():
        value = getattr(settings, f.name)
        shown = mask(value) if f.name in SECRET_FIELDS else ("" if value is None else hide(redact_urls(str(value))))
        if isinstance(value, tuple):
            shown = ",".join(value)
        rows.append((f.name, shown, settings.sources.get(f.name, "default")))
    return rows


def with_overrides(settings: Settings, **changes: Any) -> Settings:
    """A copy of `settings` with some fields changed (marked as coming from flags)."""
    sources = {**settings.sources, **{k: "flag" for k in changes}}
    return replace(settings, **changes, sources=sources)
