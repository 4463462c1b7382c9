"""The secret values shou knows, for `shou.redact.Redactor` to hide.

Known keys: every secret setting (`api_key`, `tavily_api_key`, ...), and every variable of the process's
environment and of the workspace's `.env` (trusted or not: an untrusted file's values are never used, but
a program can still print them) whose name ends in `_API_KEY`, `_KEY`, `_TOKEN`, `_SECRET` or
`_PASSWORD`; and what URLs carry (`url_secrets`: a login, key-like query values) in the base URL and the
other URL settings, and in variables whose name ends in `_URL`, `_URI`, `_ENDPOINT` or `_PROXY`; and what
the `[mcp_servers.NAME]` and `[a2a_agents.NAME]` tables say that may be a credential (their URLs' logins and
query values, their headers' values: shou.redact_servers).

Here, not in redact.py: reading the workspace's `.env` (through shou.trust) is the platform's work, and
redaction itself stays a foundation that knows neither the settings nor the file system.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .redact import _HEADERS_NAME, _SECRET_NAME, _URL_NAME, MIN_LENGTH, _header_values, looks_secret, url_secrets
from .redact_servers import server_secrets
from .settings import SECRET_FIELDS

__all__ = ["environment_version", "secrets_of"]

# Settings that hold URLs, which may carry a login or a key (a base URL's `user:pass@`, a webhook's key).
_URL_FIELDS = ("base_url", "searxng_url", "alert_webhook")
_SENT_URL = re.compile(r"(?:^|_)(?:BASE_URL|PROXY)$", re.IGNORECASE)  # URLs shou itself sends requests to


def secrets_of(settings: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values these settings, environments and the workspace's `.env` hold."""
    if settings is None and environ is None:  # an Agent made in Python: the process's environment alone
        return list(_process_secrets()[1])
    found: set[str] = set()
    for name in SECRET_FIELDS:
        value = getattr(settings, name, None)
        if value:
            found.add(str(value))
    for name in _URL_FIELDS:
        found.update(url_secrets(getattr(settings, name, None), sent=True))  # shou sends to each
    process = os.environ if environ is None else environ
    found |= _process_secrets()[0] if environ is None else _scan(environ.items(), True)
    settings_env = getattr(settings, "env", None) or {}
    # the settings' environment is the process's as it was, plus the trusted `.env`: scan only what differs
    found |= _scan(((k, v) for k, v in settings_env.items() if process.get(k) != v), True)
    dotenv = _workspace_dotenv(getattr(settings, "workspace", None))
    found |= _scan(((k, v) for k, v in dotenv.items() if k not in process and k not in settings_env), False)
    found.update(_servers_secrets(getattr(settings, "mcp_servers", None)))
    found.update(_servers_secrets(getattr(settings, "a2a_agents", None)))  # a remote agent's url and headers
    return list(_listed(found))


def _scan(items: Iterable[tuple[str, str]], sure: bool) -> set[str]:
    """The secrets of environment variables: `sure` for a trusted source; an untrusted `.env` could name any
    word a secret ("function"), and every event would lose it: from there, only what looks like a key."""
    found: set[str] = set()
    for name, value in items:
        if not value:
            continue
        if _SECRET_NAME.search(name):
            if sure or looks_secret(value):
                found.add(str(value))
        elif _HEADERS_NAME.search(name):  # `OTEL_EXPORTER_OTLP_HEADERS=api-key=...,x-team=...`
            found.update(v for v in _header_values(value) if sure or looks_secret(v))
        elif _URL_NAME.search(name):
            sent = bool(_SENT_URL.search(name)) and sure
            found.update(url_secrets(str(value), bare=sent, sent=sent))
    return found


_PROCESS: tuple[dict[Any, Any], frozenset[str], tuple[str, ...]] | None = None


def _process_secrets() -> tuple[frozenset[str], tuple[str, ...]]:
    """The secrets of this process's environment (and them as `secrets_of` lists them), scanned again only when
    it changed: every Agent made in a loop asks, and a scan of every variable with three patterns was most of the
    time an Agent took to make. The raw entries are compared (the same objects while nothing is set), not
    decoded: a copy of the dict, compared as a dict (no item tuples made: a fifth of the time)."""
    global _PROCESS
    raw = getattr(os.environ, "_data", None)
    if not isinstance(raw, dict):
        raw = None
    elif _PROCESS is not None and _PROCESS[0] == raw:
        return _PROCESS[1], _PROCESS[2]
    snapshot = dict(raw) if raw is not None else None  # taken before the scan: a change during it is seen next time
    found = frozenset(_scan(os.environ.items(), True))
    listed = _listed(found)
    if snapshot is not None:
        _PROCESS = (snapshot, found, listed)
    return found, listed


def environment_version() -> object:
    """What changes whenever the process's environment's secrets do (an object compared by identity)."""
    return _process_secrets()[1]


def _listed(found: Iterable[str]) -> tuple[str, ...]:
    """Secrets long enough to be told apart from ordinary words, the longest first (replaced first)."""
    return tuple(sorted((v for v in found if len(v) >= MIN_LENGTH), key=len, reverse=True))


def _servers_secrets(servers: Any) -> set[str]:
    """What the tables of the `mcp_servers` (or `a2a_agents`) setting hold (shou.redact_servers)."""
    found: set[str] = set()
    for table in (servers.values() if isinstance(servers, Mapping) else ()):
        if isinstance(table, Mapping):
            found.update(server_secrets(table))
    return found


def _workspace_dotenv(workspace: Any) -> Mapping[str, str]:
    if workspace is None:
        return {}
    try:
        from .trust import read_config_file

        data = read_config_file(workspace / ".env")
        if data is None:
            return {}
        import io

        from dotenv import dotenv_values

        parsed = dotenv_values(stream=io.StringIO(data.decode("utf-8", "replace")), interpolate=False)
        return {k: v for k, v in parsed.items() if v is not None}
    except Exception:  # an unreadable .env hides nothing we could know
        return {}
