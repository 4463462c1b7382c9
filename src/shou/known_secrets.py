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
from collections.abc import Mapping
from typing import Any

from .redact import _HEADERS_NAME, _SECRET_NAME, _URL_NAME, MIN_LENGTH, _header_values, looks_secret, url_secrets
from .redact_servers import server_secrets
from .settings import SECRET_FIELDS

__all__ = ["secrets_of"]

# Settings that hold URLs, which may carry a login or a key (a base URL's `user:pass@`, a webhook's key).
_URL_FIELDS = ("base_url", "searxng_url", "alert_webhook")
_SENT_URL = re.compile(r"(?:^|_)(?:BASE_URL|PROXY)$", re.IGNORECASE)  # URLs shou itself sends requests to


def secrets_of(settings: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values these settings, environments and the workspace's `.env` hold."""
    found: set[str] = set()
    for name in SECRET_FIELDS:
        value = getattr(settings, name, None)
        if value:
            found.add(str(value))
    for name in _URL_FIELDS:
        found.update(url_secrets(getattr(settings, name, None)))
    trusted = {**(os.environ if environ is None else environ), **(getattr(settings, "env", None) or {})}
    dotenv = _workspace_dotenv(getattr(settings, "workspace", None))
    for env, sure in ((trusted, True), ({k: v for k, v in dotenv.items() if k not in trusted}, False)):
        for name, value in env.items():
            if not value:
                continue
            if _SECRET_NAME.search(name):
                # An untrusted `.env` could name any word a secret ("function"), and every event would lose
                # it: from there, only what looks like a key.
                if sure or looks_secret(value):
                    found.add(str(value))
            elif _HEADERS_NAME.search(name):  # `OTEL_EXPORTER_OTLP_HEADERS=api-key=...,x-team=...`
                found.update(v for v in _header_values(value) if sure or looks_secret(v))
            elif _URL_NAME.search(name):
                found.update(url_secrets(str(value), bare=bool(_SENT_URL.search(name)) and sure))
    found.update(_servers_secrets(getattr(settings, "mcp_servers", None)))
    found.update(_servers_secrets(getattr(settings, "a2a_agents", None)))  # a remote agent's url and headers
    return sorted((v for v in found if len(v) >= MIN_LENGTH), key=len, reverse=True)


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
