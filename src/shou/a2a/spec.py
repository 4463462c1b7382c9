"""A remote A2A agent shou may call: `[a2a_agents.NAME]` in shou.toml.

`url` is where the agent is (its card is read at `URL/.well-known/agent-card.json`), `headers` what every
request to it carries (a key, a bearer token), `timeout` the seconds one call may take in all (default 300),
`description` what the model is told it is for (default: from its card). A URL and headers are where data is
sent and the credentials it is sent with, so a workspace's shou.toml may name an agent only once a person
trusted it (the `a2a_agents` setting is not `safe`: shou.config), and everything in them that may be a
credential is redacted like an MCP server's (shou.redact_servers).

The configured URL is the one place requests go: its scheme, host and port (`origin`). A card that names
endpoints elsewhere is refused (shou.a2a.card), and the HTTP client refuses any other origin (shou.a2a.http).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..setting_tables import check_remote_agent_table

__all__ = ["DEFAULT_TIMEOUT", "RemoteAgentSpec", "origin_of", "remote_specs"]

DEFAULT_TIMEOUT = 300.0


def origin_of(url: str) -> tuple[str, str, int]:
    """`(scheme, host, port)` of `url` (the port made explicit); `ValueError` when it has no host."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"not an http(s) address with a host: {url[:200]!r}")
    return scheme, host, parts.port or (443 if scheme == "https" else 80)


@dataclass(frozen=True, slots=True)
class RemoteAgentSpec:
    """How to reach one remote A2A agent (`[a2a_agents.NAME]`)."""

    # What may hold a credential is left out of the repr: a spec in a log or a traceback shows none.
    name: str
    url: str = field(repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    timeout: float = DEFAULT_TIMEOUT
    description: str = ""

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> RemoteAgentSpec:
        """An `[a2a_agents.NAME]` table, checked (`UserError` says what is wrong)."""
        check_remote_agent_table(name, table)
        return cls(name, str(table["url"]), tuple(sorted(table.get("headers", {}).items())),
                   float(table.get("timeout", DEFAULT_TIMEOUT)), str(table.get("description") or ""))

    @property
    def origin(self) -> tuple[str, str, int]:
        """Where every request to this agent goes: the configured URL's scheme, host and port."""
        return origin_of(self.url)

    @property
    def where(self) -> str:
        """The agent's address for people and events: scheme, host, port and path, without login, query or
        key-like path parts."""
        from ..redact_servers import url_path_masked

        try:
            scheme, host, port = self.origin
            path = urlsplit(self.url).path
        except ValueError:
            return "(an A2A agent)"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}{url_path_masked(path)}".rstrip("/")

    def secrets(self) -> set[str]:
        """What in this spec may be a credential (its URL's login and query, its headers' values)."""
        from ..redact_servers import server_secrets

        return server_secrets({"url": self.url, "headers": dict(self.headers)})


def remote_specs(tables: Mapping[str, Any] | None) -> dict[str, RemoteAgentSpec]:
    """The `a2a_agents` setting as specs."""
    return {name: spec if isinstance(spec, RemoteAgentSpec) else RemoteAgentSpec.from_table(name, spec)
            for name, spec in (tables or {}).items()}
