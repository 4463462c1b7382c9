"""Workspace trust: the workspace config files a person has approved, by path and exact content.

A workspace's `shou.toml` and `.env` may come from anyone: a cloned repository, or a program the agent
ran in the sandbox. Settings in them that could run code, move a secret or weaken isolation apply only
once a person has trusted that file's exact bytes with `shou trust` (the direnv / VS Code model). The
approvals live in the user's config folder (`trusted.json`), keyed by the file's absolute path and its
SHA-256, so any change to the file needs trust again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

from .errors import ConfigError
from .private import user_folder

__all__ = ["MAX_CONFIG_BYTES", "TrustStore", "digest", "read_config_file", "read_regular"]

TRUST_FILE = "trusted.json"
MAX_CONFIG_BYTES = 1_000_000


def digest(data: bytes) -> str:
    """The content hash trust is keyed on."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_regular(fd: int, limit: int) -> bytes:
    """All of the open file `fd`, which must be a regular file of at most `limit` bytes, also if it grows
    while it is read. `ValueError` saying what it is otherwise ("not a regular file", "N bytes; at most L")."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    chunks, total = [], 0
    while total <= limit and (chunk := os.read(fd, 65536)):
        chunks.append(chunk)
        total += len(chunk)
    if max(total, st.st_size) > limit:
        raise ValueError(f"{max(total, st.st_size)} bytes; at most {limit}")
    return b"".join(chunks)


def read_closing(fd: int, limit: int) -> bytes | None:
    """All of the open file `fd` if it is a regular file of at most `limit` bytes, else None; `fd` is closed."""
    try:
        return read_regular(fd, limit)
    except (ValueError, OSError):
        return None
    finally:
        os.close(fd)


def read_config_file(path: Path) -> bytes | None:
    """The bytes of a workspace config file, or None when there is none.

    The file is read once (the same bytes are hashed and parsed) without following a symlink or waiting
    on a FIFO; anything but a small regular file is a `ConfigError` naming what it is.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        kind = "a symlink" if os.path.islink(path) else e.strerror or str(e)
        raise ConfigError(f"{path} is {kind}; shou reads workspace settings only from a regular file") from None
    try:
        return read_regular(fd, MAX_CONFIG_BYTES)
    except ValueError as e:
        raise ConfigError(f"{path} is {e}; shou reads workspace settings only from a small regular file") from None
    finally:
        os.close(fd)


class TrustStore:
    """The approvals in `<user config dir>/trusted.json`."""

    def __init__(self, config_dir: Path) -> None:
        self.path = Path(config_dir) / TRUST_FILE

    def entries(self) -> dict[str, str]:
        """Trusted file path -> content hash."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.path} cannot be read ({e}); fix or delete it, then trust again") from None
        files = data.get("files") if isinstance(data, dict) else None
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}

    def is_trusted(self, path: Path, data: bytes) -> bool:
        """Whether a person trusted exactly these bytes at this path."""
        return self.entries().get(str(path)) == digest(data)

    def trust(self, path: Path, data: bytes) -> None:
        """Record `data` as the trusted content of `path`."""
        self._save({**self.entries(), str(path): digest(data)})

    def revoke(self, path: Path) -> bool:
        """Forget `path`; whether it was trusted."""
        entries = self.entries()
        if entries.pop(str(path), None) is None:
            return False
        self._save(entries)
        return True

    def _save(self, entries: dict[str, str]) -> None:
        user_folder(self.path.parent)  # the config folder: 0700 (shou.private)
        text = json.dumps({"version": 1, "files": dict(sorted(entries.items()))}, indent=1)
        fd, tmp = tempfile.mkstemp(prefix=".trusted-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            os.replace(tmp, self.path)  # a reader never sees half a file
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
