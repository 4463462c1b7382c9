"""`shou memory`: add, search, list, forget and import long-term memories; show what links to an entity.

Every command works on `--store PATH`, by default `.shou/memory.db` in the workspace (`--workspace`,
else the current folder). Mounted on the main app with `app.add_typer(memory_app, name="memory")`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ShouError
from ..jsonfile import load_json
from ..markup import escape
from ..memory import Fact, Memory, MemoryStore, NewMemory
from ..memory.records import validate
from ..wellformed import ill_formed
from ..workspace import state_database
from .common import finite, utf8_text
from .render import json_text

memory_app = typer.Typer(
    name="memory", help="Long-term memory: add, search, list, forget and import memories.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
)
err = Console(stderr=True, highlight=False, soft_wrap=True)

StoreOpt = Annotated[Path | None, typer.Option("--store", help="The memory file (default .shou/memory.db).")]
WorkspaceOpt = Annotated[Path | None, typer.Option("--workspace", "-w", help="Folder whose .shou/memory.db to use.")]
BM25Opt = Annotated[bool, typer.Option("--bm25-only", help="Do not load the embedding model (keyword search only).")]
TagOpt = Annotated[list[str] | None, typer.Option("--tag", "-t", help="A tag (repeatable).", callback=utf8_text)]
SessionOpt = Annotated[str | None, typer.Option("--session", "-s", help="Only memories of this session.",
                                                callback=utf8_text)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON lines instead of a table.")]


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(2)


def _open(store: Path | None, workspace: Path | None, bm25_only: bool) -> MemoryStore:
    path = store if store is not None else (workspace or Path.cwd()) / ".shou" / "memory.db"
    try:
        if store is None:
            path = state_database((workspace or Path.cwd()).resolve(), "memory.db")
        return MemoryStore(path, embeddings=not bm25_only)
    except Exception as e:  # sqlite3.DatabaseError for a file that is not a store, OSError for a bad path
        raise _fail(f"cannot open memory store {path}: {e}") from None


def _parse_time(value: Any, where: str) -> float | None:
    """A memory time: seconds since the epoch, or an ISO 8601 date/time (local time when naive)."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if _when(float(value)).startswith("?"):
            raise _fail(f"{where}: time {value!r} is out of range (seconds since 1970, years 1-9999)")
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip()).timestamp()
        except ValueError:
            pass
    raise _fail(f"{where}: time {value!r} is neither seconds since 1970 nor an ISO date such as 2024-05-08")


def _jsonl(file: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, object) for every non-blank line of a JSON-lines file; bad lines are named, not tracebacks."""
    try:
        raw_lines = file.read_bytes().splitlines()
    except OSError as e:
        raise _fail(f"cannot read {file}: {e.strerror or e}") from None
    for number, raw in enumerate(raw_lines, start=1):
        where = f"{file}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _fail(f"{where}: not valid UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
        if not line.strip():
            continue
        try:
            obj = load_json(line, parse_constant=_no_constant)  # nested too deep: named, not a RecursionError
        except (json.JSONDecodeError, ValueError) as e:
            raise _fail(f"{where}: not JSON ({getattr(e, 'msg', e)})") from None
        if not isinstance(obj, dict):
            raise _fail(f"{where}: expected a JSON object")
        yield where, obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _when(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):  # a bad time stored by an older shou: show it, do not fail
        return f"? ({seconds!r})"


# Who a memory is from: what the model saved itself (`save_memory`, source "agent") is recalled as outside
# content; everything else as the person's own. A listing says so, and an import of it keeps it so.
AGENT_SOURCE = "agent"
ORIGINS = ("agent", "person")


def _origin(m: Memory) -> str:
    return "agent" if m.source == AGENT_SOURCE else "person"


def _table(memories: list[Memory], scored: bool) -> None:
    # "by": agent for what the model saved itself (recalled as outside content), else you
    table = Table("id", *(["score"] if scored else []), "time", "by", "tags", "text", box=None)
    for m in memories:
        when = _when(m.time)
        score = [f"{m.score:.3f}"] if scored else []
        by = "agent" if _origin(m) == "agent" else "you"
        table.add_row(escape(m.id), *score, when, by, escape(", ".join(m.tags)), escape(m.text))
    Console(highlight=False).print(table)


def _as_json(m: Memory) -> dict[str, Any]:
    return {"id": m.id, "text": m.text, "time": m.time, "session": m.session, "source": m.source,
            "origin": _origin(m), "tags": list(m.tags)}


def _imported_source(obj: dict[str, Any], where: str, given: str) -> str:
    """The source an imported line is stored with: "agent" when the line says the model saved it (an "origin"
    of "agent", or the "source" a listing of such a memory carries), so exporting and importing cannot turn the
    model's memory (perhaps an instruction it read on a web page) into the person's; else `given`."""
    origin = obj.get("origin")
    if origin is not None and origin not in ORIGINS:
        raise _fail(f'{where}: "origin" must be "agent" or "person"')
    if origin == "agent" or obj.get("source") == AGENT_SOURCE:
        return AGENT_SOURCE
    return given


@memory_app.command()
def add(
    text: Annotated[str, typer.Argument(help="The memory, as a sentence.")],
    tag: TagOpt = None, session: Annotated[str, typer.Option("--session", "-s", help="Session it belongs to.")] = "",
    source: Annotated[str, typer.Option("--source", help="Where it came from.")] = "cli",
    store: StoreOpt = None, workspace: WorkspaceOpt = None, bm25_only: BM25Opt = False,
) -> None:
    """Store TEXT as a memory (a copy of a stored memory is not stored twice)."""
    with _open(store, workspace, bm25_only) as db:
        try:
            mem, added = db.add(text, session=session, source=source, tags=tag or ())
        except ShouError as e:
            raise _fail(str(e)) from None
    typer.echo(f"added {mem.id}" if added else f"already stored as {mem.id}")


@memory_app.command()
def search(
    query: Annotated[str | None, typer.Argument(help="What to look for.", callback=utf8_text)] = None,
    queries: Annotated[Path | None, typer.Option(
        "--queries", help='A JSON-lines file of {"id": ..., "query": ...}, answered one JSON line each.')] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, max=10_000, help="How many memories per query.")] = 10,
    tag: TagOpt = None, session: SessionOpt = None, json_lines: JsonOpt = False,
    store: StoreOpt = None, workspace: WorkspaceOpt = None, bm25_only: BM25Opt = False,
) -> None:
    """Find the memories best matching QUERY (or each query of --queries), best first."""
    if (query is None) == (queries is None):
        raise _fail("give either a QUERY or --queries FILE.jsonl")
    asked: list[tuple[Any, str]] = [(None, query or "")]
    if queries is not None:
        asked = []
        for where, obj in _jsonl(queries):
            if not isinstance(obj.get("query"), str):
                raise _fail(f'{where}: needs a "query" string')
            if ill_formed(obj["query"]):
                raise _fail(f"{where}: its query is not valid Unicode (a lone surrogate)")
            asked.append((obj.get("id"), obj["query"]))
    with _open(store, workspace, bm25_only) as db:
        for qid, text in asked:
            found = db.search(text, top_k, tags=tag or (), session=session)
            if json_lines or queries is not None:
                results = [{"id": m.id, "score": m.score, "text": m.text} for m in found]
                typer.echo(json_text({"id": qid, "results": results}))
            else:
                _table(found, scored=True)


@memory_app.command(name="list")
def list_memories(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1_000_000, help="How many, newest first.")] = 50,
    tag: TagOpt = None, session: SessionOpt = None, json_lines: JsonOpt = False,
    store: StoreOpt = None, workspace: WorkspaceOpt = None,
) -> None:
    """Show stored memories, newest first."""
    with _open(store, workspace, bm25_only=True) as db:
        found = db.list(limit, tags=tag or (), session=session)
        total = db.count()
    if json_lines:
        for m in found:
            typer.echo(json_text(_as_json(m)))
        return
    _table(found, scored=False)
    err.print(f"{len(found)} of {total} memories")


@memory_app.command()
def forget(
    ids: Annotated[list[str] | None, typer.Argument(help="Ids of the memories to delete.", callback=utf8_text)] = None,
    before: Annotated[str | None, typer.Option("--before", help="Memories older than this ISO date.")] = None,
    unused_days: Annotated[float | None, typer.Option(
        "--unused-days", min=0, max=1_000_000, callback=finite,
        help="Memories not recalled (nor added) in this many days.")] = None,
    tag: TagOpt = None, session: SessionOpt = None,
    everything: Annotated[bool, typer.Option("--all", help="Delete every memory.")] = False,
    store: StoreOpt = None, workspace: WorkspaceOpt = None,
) -> None:
    """Delete memories by id, or all those matching every filter given."""
    import time

    if not (ids or before or unused_days is not None or tag or session or everything):
        raise _fail("say what to forget: ids, --before, --unused-days, --tag, --session or --all")
    until = _parse_time(before, "--before")
    unused_since = time.time() - unused_days * 86400 if unused_days is not None else None
    with _open(store, workspace, bm25_only=True) as db:
        n = db.forget(ids or (), before=until, unused_since=unused_since, tags=tag or (), session=session,
                      everything=everything)
    typer.echo(f"forgot {n} {'memory' if n == 1 else 'memories'}")


@memory_app.command(name="trust")
def trust_memories(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Sign them without asking (after showing them).")] = False,
    store: StoreOpt = None, workspace: WorkspaceOpt = None,
) -> None:
    """Show the memories no run of yours wrote here (a cloned repository's, a copied file's, or ones older
    than signatures) and, once you agree, sign them so they are recalled into runs again."""
    import sys

    from ..memory.signing import sign_memories, unsigned

    with _open(store, workspace, bm25_only=True) as db:
        found = unsigned(db)
        if not found:
            typer.echo("every memory here was written by your own runs")
            return
        _table(found, scored=False)
        if not yes:
            if not sys.stdin.isatty():
                raise _fail("not a terminal: run `shou memory trust --yes` to sign these without a prompt")
            if not typer.confirm(f"Recall these {len(found)} memories in your runs from now on?", default=False):
                raise typer.Exit(1)
        n = sign_memories(db, [m.id for m in found])
    typer.echo(f"signed {n} {'memory' if n == 1 else 'memories'}")


@memory_app.command(name="import")
def import_memories(
    file: Annotated[Path, typer.Argument(
        help='JSON lines: {"text": ..., "id": ..., "time": ..., "session": ..., "tags": [...], '
             '"facts": [[subject, relation, object], ...], "origin": "agent" | "person"} (what '
             '`shou memory list --json` prints: a memory the agent saved stays the agent\'s).')],
    source: Annotated[str | None, typer.Option("--source", help="Source to record (default: the file name).")] = None,
    store: StoreOpt = None, workspace: WorkspaceOpt = None, bm25_only: BM25Opt = False,
) -> None:
    """Add one memory per line of FILE (copies of stored memories are skipped). A line whose "origin" (or
    "source") is "agent" is kept as a memory the agent saved, recalled as outside content; the others are
    recorded with --source (default: the file name) and recalled as yours."""
    items: list[NewMemory] = []
    for where, obj in _jsonl(file):
        text, tags = obj.get("text"), obj.get("tags") or []
        if not isinstance(text, str) or not text.strip():
            raise _fail(f'{where}: needs a non-empty "text" string')
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise _fail(f'{where}: "tags" must be a list of strings')
        facts = obj.get("facts") or []
        if not isinstance(facts, list) or not all(
            isinstance(f, list) and len(f) == 3 and all(isinstance(x, str) for x in f) for f in facts
        ):
            raise _fail(f'{where}: "facts" must be a list of [subject, relation, object] strings')
        mem_id, session = obj.get("id"), obj.get("session")
        # str() made {} the id "{}", [] "[]" and true "True": an id must be a non-empty string, or a whole number
        # (datasets number their records; 7 is taken as "7", as it always was), as the other fields' types are
        if isinstance(mem_id, int) and not isinstance(mem_id, bool):
            mem_id = str(mem_id)
        if mem_id is not None and not (isinstance(mem_id, str) and mem_id.strip()):
            raise _fail(f'{where}: "id" must be a non-empty string (or a whole number)')
        if session is not None and not isinstance(session, str):
            raise _fail(f'{where}: "session" must be a string')
        item = NewMemory(
            text, id=mem_id, time=_parse_time(obj.get("time"), where),
            session=session or "", source=_imported_source(obj, where, source if source is not None else file.name),
            tags=tags,
            facts=[Fact(*f) for f in facts],
        )
        try:
            validate(item, where)
        except ShouError as e:
            raise _fail(str(e)) from None
        items.append(item)
    with _open(store, workspace, bm25_only) as db:
        try:
            results = db.add_many(items)
        except ShouError as e:
            raise _fail(str(e)) from None
    added = sum(1 for _, ok in results if ok)
    typer.echo(f"imported {added} memories ({len(results) - added} already stored)")


@memory_app.command()
def graph(
    entity: Annotated[str, typer.Argument(help='A name memories mention, e.g. "Alice" or "Quillon Labs" (any case).',
                                          callback=utf8_text)],
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10_000,
                                       help="At most this many of each kind.")] = 20,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    store: StoreOpt = None, workspace: WorkspaceOpt = None,
) -> None:
    """Show what is linked to ENTITY: its relations, the entities named with it, the memories naming it."""
    with _open(store, workspace, bm25_only=True) as db:
        view = db.graph(entity, limit)
    if view is None:
        raise _fail(f"no memory names {entity!r}")
    if json_out:
        typer.echo(json_text({
            "entity": view.name, "memories": [{"id": i, "text": t} for i, t in view.memories],
            "relations": [{"subject": r.subject, "relation": r.predicate, "object": r.object, "memory": r.memory,
                           "stated": r.stated} for r in view.relations],
            "alongside": [{"entity": n, "memories": c} for n, c in view.alongside],
        }))
        return
    out = Console(highlight=False)
    out.print(f"[bold]{escape(view.name)}[/]: named in {len(view.memories)} memories")
    if view.relations:
        out.print("\n[bold]relations[/]")
        for r in view.relations:
            mark = "" if r.stated else " [dim](read from text)[/]"
            out.print(f"  {escape(r.subject)} --{escape(r.predicate)}--> {escape(r.object)}  "
                      f"[dim]\\[{escape(r.memory)}][/]{mark}")
    if view.alongside:
        out.print("\n[bold]named alongside[/]")
        for name, count in view.alongside:
            out.print(f"  {escape(name)} ({count})")
    out.print("\n[bold]memories[/]")
    for mem_id, text in view.memories:
        out.print(f"  [dim]\\[{escape(mem_id)}][/] {escape(text)}")
