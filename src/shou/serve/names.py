"""Each API user's session names are their own: the name a user gives (a run's `session`, a fork's `name`, the
`{name}` of `/v1/sessions/{name}`) is looked up in that user's namespace, never in one all users share.

The store keeps a token user's session `N` as `u~KEY~N` (`stored_name`): `KEY` is `user_key(user)`, a hash
that says nothing about the user and is always 16 characters, so a stored name is at most 147 characters (a
name is at most 128, `SESSION_NAME`), well inside PostgreSQL's btree limit. `~` is in no name a user may give,
so no name of one user is ever another's stored name, nor one of the person at the machine's. Every answer
shows the user their own name (`shown_name`), never the stored one.

The person at the machine (`local`, a server with no tokens) keeps bare names: their server and `shou run` /
`shou show` share sessions, as they always did. A session a token user made before names were per user (a
`serve_sessions` row of a bare name) stays theirs under that name (`RunQueue.session_of`); so does a session
of A2A (`a2a-...`, `shou.serve.a2a_requests.session_for`), and one of the OpenAI endpoint made before.

Another user's session is then simply not there: asking for it asks for one of the caller's own, which is
answered as any name the caller never used (a run or a fork makes it, a read is a 404).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

from .auth import LOCAL_USER

__all__ = ["given_name", "shown_event", "shown_name", "shown_text", "stored_name", "user_key"]

_GIVEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # shou.serve.schema.SESSION_NAME


def user_key(user: str) -> str:
    """A name for `user`'s files, schema and sessions that says nothing about the user and needs no quoting."""
    return hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _prefix(user: str) -> str:
    return f"u~{user_key(user)}~"


def given_name(name: str) -> bool:
    """Whether `name` is one a user may give (a path's name that is not can be no session of theirs)."""
    return _GIVEN.fullmatch(name) is not None


def stored_name(user: str, name: str) -> str:
    """The store's name for `user`'s new session `name` (bare for the person at the machine)."""
    return name if user == LOCAL_USER else _prefix(user) + name


def shown_name(user: str, stored: str) -> str:
    """`user`'s name for their session the store keeps as `stored` (a bare one is shown as it is)."""
    prefix = _prefix(user)
    return stored[len(prefix):] if user != LOCAL_USER and stored.startswith(prefix) else stored


def shown_text(user: str, text: str, *stored: str) -> str:
    """`text` (a store's error message) with each of these stored names as `user` knows it."""
    for name in stored:
        text = text.replace(name, shown_name(user, name))
    return text


def shown_event(user: str, event: Any) -> Any:
    """`event` as `user` sees it: a session it names (a run's start or resume) by `user`'s name."""
    session = getattr(event, "session", None)
    if not isinstance(session, str) or not dataclasses.is_dataclass(event) or isinstance(event, type):
        return event
    shown = shown_name(user, session)
    return event if shown == session else dataclasses.replace(event, session=shown)
