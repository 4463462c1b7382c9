"""Who is asking: bearer tokens from a file (`TOKEN USER` per line), compared by their hashes."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from ..errors import UserError

LOCAL_USER = "local"


class Tokens:
    """The tokens a server accepts; `user_of(header)` names the user of an `Authorization` header."""

    def __init__(self, pairs: dict[str, str]) -> None:
        # Keyed by the token's hash: a lookup's time says nothing about how much of a wrong token matched.
        self._users = {hashlib.sha256(token.encode()).digest(): user for token, user in pairs.items()}

    @classmethod
    def load(cls, path: Path) -> Tokens:
        """Read a tokens file; `UserError` naming the line that is not `TOKEN USER`."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise UserError(f"cannot read the tokens file {path}: {e.strerror or e}") from None
        pairs: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or len(parts[0]) < 16:
                raise UserError(f"{path}:{number}: expected `TOKEN USER` with a token of at least 16 characters")
            if parts[1] == LOCAL_USER:
                raise UserError(f"{path}:{number}: the user name {LOCAL_USER!r} is the person at the machine "
                                "(no tokens); give the token another name")
            pairs[parts[0]] = parts[1]
        if not pairs:
            raise UserError(f"{path} has no tokens")
        return cls(pairs)

    def user_of(self, authorization: str | None) -> str | None:
        """The user whose token the header carries, or None."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        digest = hashlib.sha256(authorization[7:].strip().encode()).digest()
        for known, user in self._users.items():
            if hmac.compare_digest(known, digest):
                return user
        return None
