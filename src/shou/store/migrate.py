"""Named SQLite migrations, applied in order and recorded in `PRAGMA user_version`."""

from __future__ import annotations

import sqlite3

Migration = tuple[str, list[str]]


def migrate(db: sqlite3.Connection, migrations: list[Migration]) -> None:
    """Apply the migrations `db` has not had yet, each in its own transaction.

    Safe when several processes open the same file at once: the version is read again under the write
    lock, so a migration another process just applied is skipped.
    """
    version = db.execute("PRAGMA user_version").fetchone()[0]
    for number, (_name, statements) in enumerate(migrations, start=1):
        if number <= version:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] < number:
                for statement in statements:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
