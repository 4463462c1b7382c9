"""What an MCP server's table (`[mcp_servers.NAME]`) holds that may be a credential: a trusted table's url,
args, env and headers are secret sources for the redactor (shou.redact).

Found: the login and key-like query values of its url, every value of its `headers` (with the token of
`Bearer ...`, and the login a `Basic ...` value encodes), the values of its `env` whose name is key-like (or
that look like keys), and in its `args` the value of a key-like flag (`--token=X`, `--api-key X`),
`NAME=value` with a key-like name, the credentials of a URL, and any argument that looks like a key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .redact import _HEADERS_NAME, _SECRET_NAME, _URL_NAME, MIN_LENGTH, _header_values, url_secrets

__all__ = ["looks_like_key", "server_secrets"]

# A word of a flag's or variable's name that says its value is a credential (`--api-key`, `--github-token`,
# `SLACK_BOT_TOKEN`, `x-auth`): whole words only, so `--author` or `--keyboard-layout` are not.
_KEY_WORD = re.compile(r"(?:^|[-_.])(?:api[-_]?key|apikey|key|keys|token|tokens|secret|secrets|password|passwd|"
                       r"pass|pwd|auth|authorization|credentials?|cookie|bearer|pat|sig|signature|jwt|session)(?:$|[-_.])",
                       re.IGNORECASE)
# Headers that carry no credential (their values are words and media types, not to be hidden everywhere).
_PLAIN_HEADERS = frozenset({"accept", "accept-language", "content-type", "user-agent", "mcp-protocol-version",
                            "accept-encoding", "cache-control"})


def looks_like_key(value: str) -> bool:
    """Whether a value named nothing secret still looks like a key: one long word mixing letters and digits
    (or a very long one), not a path, a package, a URL or a version."""
    if any(c.isspace() for c in value) or value.startswith(("/", "~", ".", "-", "@")) or "/" in value or "==" in value:
        return False
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    return (len(value) >= 16 and letters and digits) or len(value) >= 40


def server_secrets(table: Mapping[str, Any]) -> set[str]:
    """The credentials an MCP server's table (`url`, `args`, `env`, `headers`) may hold (see the module)."""
    found: set[str] = set()
    url = table.get("url")
    if isinstance(url, str):
        found.update(url_secrets(url))  # shou sends to it: a bare password counts
    args = [a for a in table.get("args") or () if isinstance(a, str)]
    for i, arg in enumerate(args):
        found.update(_arg_secrets(arg, args[i + 1] if i + 1 < len(args) else None))
    for name, value in _pairs(table.get("env")):
        found.update(_named_secrets(name, value))
    for name, value in _pairs(table.get("headers")):
        if name.strip().lower() not in _PLAIN_HEADERS or looks_like_key(value.strip()):
            found.update(_credential(value))
    return {v for v in found if len(v) >= MIN_LENGTH}


def _pairs(table: Any) -> list[tuple[str, str]]:
    """The (name, value) string pairs of an `env` or `headers` table with a value."""
    if not isinstance(table, Mapping):
        return []
    return [(k, v) for k, v in table.items() if isinstance(k, str) and isinstance(v, str) and v.strip()]


def _arg_secrets(arg: str, following: str | None) -> set[str]:
    """The secrets one command-line argument holds, `following` being the next argument (`--token X`)."""
    name, eq, value = arg.partition("=")
    if arg.startswith("-"):
        if _KEY_WORD.search(name.lstrip("-")):
            if eq:
                return _credential(value)
            return _credential(following) if following is not None and not following.startswith("-") else set()
        return url_secrets(value) | ({value} if eq and looks_like_key(value) else set())
    if "://" in arg:
        return url_secrets(arg)
    head, colon, rest = arg.partition(":")
    if colon and _KEY_WORD.search(head.strip()) and rest.strip():  # `--header "Authorization: Bearer X"`
        return _credential(rest.strip())
    if eq:  # `API_KEY=...` (for env, docker -e)
        return _named_secrets(name, value)
    return {arg} if looks_like_key(arg) else set()


def _named_secrets(name: str, value: str) -> set[str]:
    """The secrets of a `NAME=value` a trusted table gives a server."""
    if _SECRET_NAME.search(name) or _KEY_WORD.search(name):
        return _credential(value)
    if _HEADERS_NAME.search(name):
        return _header_values(value)
    if _URL_NAME.search(name) or "://" in value:
        return url_secrets(value)
    return {value} if looks_like_key(value) else set()


def _credential(value: str) -> set[str]:
    """A credential's value, and the token of an `Authorization`-style value (`Bearer X`, `token X`)."""
    value = value.strip()
    found = {value} if value else set()
    scheme, space, token = value.partition(" ")
    token = token.strip()
    if space and token and scheme.isalpha():
        found.add(token)
        if scheme.lower() == "basic":  # `Basic base64(user:password)`: the login and the password too
            import base64
            import binascii

            try:
                login = base64.b64decode(token, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return found
            found.update({login, login.partition(":")[2]} - {""})
    return found
