"""Who is asking: bearer tokens from a file (`TOKEN USER` per line), or the one token of the person at the
machine (`local`: generated at start, or from `SHOU_SERVE_TOKEN` or `--token-file`), compared by their hashes."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from ..errors import UserError

LOCAL_USER = "local"
MIN_TOKEN = 16
TOKEN_ENV = "SHOU_SERVE_TOKEN"


MAX_TOKENS_FILE = 1 << 20


def read_secret_file(path: Path, what: str) -> str:
    """The text of a file of tokens, which must be its owner's alone (like ssh's keys): `UserError` when it is
    a symlink, not a regular file, another user's, or group or others may read or write it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if os.path.islink(path):
            raise UserError(f"{what} {path} is a symlink; give the file itself") from None
        raise UserError(f"cannot read {what} {path}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{what} {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise UserError(f"{what} {path} belongs to another user (uid {st.st_uid}); it must be yours alone")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise UserError(f"{what} {path} may be read by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                            f"anyone who reads it can act as its users. Run `chmod 600 {path}` and start again")
        data = f.read(MAX_TOKENS_FILE + 1)
    if len(data) > MAX_TOKENS_FILE:
        raise UserError(f"{what} {path} is over {MAX_TOKENS_FILE:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"cannot read {what} {path}: it is not UTF-8 text") from None


class Tokens:
    """The tokens a server accepts; `user_of(header)` names the user of an `Authorization` header."""

    def __init__(self, pairs: dict[str, str]) -> None:
        # Keyed by the token's hash: a lookup's time says nothing about how much of a wrong token matched.
        self._users = {hashlib.sha256(token.encode()).digest(): user for token, user in pairs.items()}

    @classmethod
    def load(cls, path: Path) -> Tokens:
        """Read a tokens file; `UserError` naming the line that is not `TOKEN USER`."""
        text = read_secret_file(path, "the tokens file")
        pairs: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or len(parts[0]) < MIN_TOKEN:
                raise UserError(f"{path}:{number}: expected `TOKEN USER` with a token of at least 16 characters")
            if parts[1] == LOCAL_USER:
                raise UserError(f"{path}:{number}: the user name {LOCAL_USER!r} is the person at the machine "
                                "(no tokens); give the token another name")
            pairs[parts[0]] = parts[1]
        if not pairs:
            raise UserError(f"{path} has no tokens")
        return cls(pairs)

    @classmethod
    def local(cls, token_file: Path | None = None) -> tuple[Tokens, str]:
        """The tokens of a server with no tokens file: the one token of user `local` (from `token_file`, else
        `SHOU_SERVE_TOKEN`, else a new random one) and that token. Every local account can reach a loopback
        port, so the port alone says nothing about who is asking."""
        if token_file is not None:
            token = read_secret_file(token_file, "the token file").strip()
            where = str(token_file)
        else:
            token, where = os.environ.get(TOKEN_ENV, "").strip(), TOKEN_ENV
            if not token:
                token = secrets.token_urlsafe(24)
        if len(token) < MIN_TOKEN or any(c.isspace() for c in token) or not token.isprintable():
            raise UserError(f"{where}: the token must be one word of at least {MIN_TOKEN} printable characters")
        return cls({token: LOCAL_USER}), token

    def user_of(self, authorization: str | None) -> str | None:
        """The user whose token the header carries, or None."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        digest = hashlib.sha256(authorization[7:].strip().encode()).digest()
        for known, user in self._users.items():
            if hmac.compare_digest(known, digest):
                return user
        return None
