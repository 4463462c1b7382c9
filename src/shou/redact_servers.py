"""What an MCP server's table (`[mcp_servers.NAME]`) holds that may be a credential: a trusted table's url,
args, env and headers are secret sources for the redactor (shou.redact).

Over-redaction is preferred, since a credential's name says nothing reliable (`?code=`, `-p`, `DB_PASSPHRASE`).
Found: in its url, the login, every query value, the fragment, and each path part that looks like a key (the
ones `url_path_masked` masks when the server is shown); every value of its `env` and of its `headers` (with the
token of `Bearer ...`, and the login a `Basic ...` value encodes); and in its `args` every value that is not
plainly a flag, a path, a package or a module (`--token=X`, `-p X`, `NAME=value`, a URL's credentials, a key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .redact import (
    _HEADERS_NAME,
    _SECRET_NAME,
    _URL_NAME,
    MIN_LENGTH,
    _header_values,
    looks_like_key,
    url_path_secrets,
    url_secrets,
)

__all__ = ["looks_like_key", "server_secrets", "url_path_masked", "url_path_secrets"]

# A word of a flag's or variable's name that says its value is a credential (`--api-key`, `--github-token`,
# `SLACK_BOT_TOKEN`, `x-auth`): whole words only, so `--author` or `--keyboard-layout` are not.
_KEY_WORD = re.compile(r"(?:^|[-_.])(?:api[-_]?key|apikey|key|keys|token|tokens|secret|secrets|password|passwd|"
                       r"pass|pwd|auth|authorization|credentials?|cookie|bearer|pat|sig|signature|jwt|session)(?:$|[-_.])",
                       re.IGNORECASE)



def url_path_masked(path: str) -> str:
    """`path` with its key-like parts (`url_path_secrets`) shown as `***`."""
    secret = set(url_path_secrets(path))
    return "/".join("***" if p in secret else p for p in path.split("/"))


def server_secrets(table: Mapping[str, Any]) -> set[str]:
    """The credentials an MCP server's table (`url`, `args`, `env`, `headers`) may hold (see the module)."""
    found: set[str] = set()
    url = table.get("url")
    if isinstance(url, str):
        found.update(_url_table_secrets(url))
    args = [a for a in table.get("args") or () if isinstance(a, str)]
    for i, arg in enumerate(args):
        found.update(_arg_secrets(arg, args[i - 1] if i else None))
    for _, value in _pairs(table.get("env")):
        found.update(_credential(value) | _header_values(value) | url_secrets(value))
    for _, value in _pairs(table.get("headers")):
        found.update(_credential(value))
    return {v for v in found if len(v) >= MIN_LENGTH}


def _url_table_secrets(url: str) -> set[str]:
    """A trusted server url's login, every query value (as written and decoded), its fragment, and its key-like
    path parts: a server's credential can be named anything (`?code=`), or be a path part (`/s/TOKEN/`)."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    found = url_secrets(url, sent=True)  # shou sends to it: a bare password, the fragment, key-like path parts
    try:
        parts = urlsplit(url)
    except ValueError:
        return found | {url}
    for part in parts.query.split("&"):  # and, as a server's credential can be named anything, every query value
        value = part.partition("=")[2]
        found.update({value, unquote(value)} - {""})
    found.update(v for _, v in parse_qsl(parts.query) if v)
    return found


def _pairs(table: Any) -> list[tuple[str, str]]:
    """The (name, value) string pairs of an `env` or `headers` table with a value."""
    if not isinstance(table, Mapping):
        return []
    return [(k, v) for k, v in table.items() if isinstance(k, str) and isinstance(v, str) and v.strip()]


def _plain_word(arg: str, before: str | None) -> bool:
    """Whether an argument is plainly not a credential: a flag, a path, a package, or the module of `-m`."""
    if arg.startswith(("-", "/", "~", ".", "@")) or "/" in arg:
        return True
    return before == "-m" and all(p.isidentifier() for p in arg.split("."))


def _arg_secrets(arg: str, before: str | None) -> set[str]:
    """The secrets one command-line argument holds, `before` being the argument before it (`-p X`)."""
    name, eq, value = arg.partition("=")
    if arg.startswith("-"):
        if eq and (_KEY_WORD.search(name) or not _plain_word(value, None)):
            return _credential(value) | url_secrets(value)
        return url_secrets(value) if eq else set()
    # The value of a flag, whatever the flag is named (`-p hunter2pw`, `--api-key X`), as a whole too.
    found = _credential(arg) if before is not None and before.startswith("-") and not _plain_word(arg, before) \
        else set()
    if "://" in arg:
        return found | url_secrets(arg)
    head, colon, rest = arg.partition(":")
    if colon and _KEY_WORD.search(head.strip()) and rest.strip():  # `--header "Authorization: Bearer X"`
        return found | _credential(rest.strip())
    if eq:  # `API_KEY=...` (for env, docker -e)
        return found | _named_secrets(name, value)
    return found | ({arg} if looks_like_key(arg) else set())


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
