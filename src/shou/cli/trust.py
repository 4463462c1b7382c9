"""`shou trust`: approve (or revoke) the exact content of a workspace's `shou.toml` and `.env`, and of what
the model reads as instructions there (`AGENTS.md`, `CLAUDE.md`, the folders' own, `.shou/AGENTS.md`,
`.shou/MEMORY.md`, `.agents/skills/*/SKILL.md`, `.agents/commands/*.md`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from ..errors import ShouError
from ..markup import escape

if TYPE_CHECKING:
    from ..trust import TrustStore

WORKSPACE_FILES = ("shou.toml", ".env")
SECRET_NAME = re.compile(r"(?i)key|token|secret|password|passwd|credential")


def trust(
    workspace: Annotated[Path | None, typer.Option("--workspace", "-w", help="The workspace (default: here).")] = None,
    revoke: Annotated[bool, typer.Option("--revoke", help="Forget the approval of this workspace's files.")] = False,
    show: Annotated[bool, typer.Option("--list", help="List every trusted file and whether it changed.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Trust without asking (after showing what they set).")]
    = False,
) -> None:
    """Trust this workspace's shou.toml and .env as they are now, so all their settings apply, and its
    instructions for the model (AGENTS.md and CLAUDE.md, also in subfolders, .shou/AGENTS.md, .shou/MEMORY.md,
    .agents/skills/, .agents/commands/), so the model sees them and the commands run.

    Until then, settings that could run code, move a secret or weaken isolation (provider, base URLs,
    keys, the sandbox backend, allow-lists) are ignored in them. Any later change needs trust again.
    """
    from ..config import user_config_dir
    from ..trust import TrustStore, read_config_file

    out = Console(highlight=False, soft_wrap=True)
    store = TrustStore(user_config_dir())
    root = (workspace or Path.cwd()).expanduser().resolve()
    try:
        if show:
            _list(out, store)
            return
        if revoke:
            gone = [Path(p) for p in store.entries() if _belongs(Path(p), root) and store.revoke(Path(p))]
            for path in gone:
                out.print(f"no longer trusted: {escape(str(path))}")
            if not gone:
                out.print(f"nothing was trusted in {escape(str(root))}")
            return
        found = {root / name: data for name in WORKSPACE_FILES if (data := read_config_file(root / name)) is not None}
    except ShouError as e:
        Console(stderr=True, highlight=False).print(f"[red]error:[/] {escape(str(e))}")
        raise typer.Exit(2) from None
    from ..instructions import instruction_files

    notes: list[str] = []
    told = instruction_files(root, notes)  # what the model will read as instructions: trusted by content too
    for note in notes:
        Console(stderr=True, highlight=False).print(f"[yellow]warning:[/] {escape(note)}")
    if not found and not told:
        out.print(f"nothing to trust: no shou.toml, .env, AGENTS.md, CLAUDE.md, .shou/AGENTS.md, .shou/MEMORY.md, "
                  f".agents/skills/ or .agents/commands/ in {escape(str(root))}")
        return
    _show(out, found, told)
    found.update(told)
    if not yes:
        if not sys.stdin.isatty():
            Console(stderr=True, highlight=False).print(
                "[red]error:[/] not a terminal: run `shou trust --yes` to trust these files without a prompt")
            raise typer.Exit(2)
        if not typer.confirm("Trust these files as they are now?", default=False):
            out.print("nothing trusted")
            raise typer.Exit(1)
    for path, data in found.items():
        store.trust(path, data)
        out.print(f"trusted {escape(str(path))}")


def _list(out: Console, store: TrustStore) -> None:
    from ..trust import digest, read_config_file

    entries = store.entries()
    if not entries:
        out.print("nothing is trusted yet")
    for path, hashed in entries.items():
        try:
            data = read_config_file(Path(path))
        except ShouError as e:
            state = f"[red]{escape(str(e))}[/]"
        else:
            state = ("[yellow]missing[/]" if data is None else "[green]unchanged[/]"
                     if digest(data) == hashed else "[red]changed since trusted: not applied[/]")
        out.print(f"{escape(path)}  {state}")


def _what_it_sets(name: str, data: bytes) -> list[str]:
    """The settings a file now applies, so the person sees what they agreed to (secrets masked)."""
    import io
    import tomllib

    from ..config import SECRET_FIELDS, mask

    if name == ".env":
        from dotenv import dotenv_values

        values = dotenv_values(stream=io.StringIO(data.decode("utf-8", "replace")), interpolate=False)
        return [f"{_name(k)}={mask(v) if SECRET_NAME.search(k) else repr(v)}" for k, v in sorted(values.items())
                if v is not None]
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        return [f"(not valid TOML: {e})"]
    from ..redact import Redactor
    from ..redact_servers import server_secrets

    tables = [t for key in ("mcp_servers", "a2a_agents") if isinstance(parsed.get(key), dict)
              for t in parsed[key].values() if isinstance(t, dict)]
    hide = Redactor([v for t in tables for v in server_secrets(t)]).text  # the keys a server's table holds too
    return [f"{_name(key)} = {mask(str(value)) if key in SECRET_FIELDS else hide(repr(value))}"
            for key, value in parsed.items()]


def _show(out: Console, settings: dict[Path, bytes], instructions: dict[Path, bytes]) -> None:
    """What the person agrees to, before they agree: what each settings file sets, and how each
    instruction file starts."""
    from ..trust import digest

    for path, data in settings.items():
        out.print(f"{escape(str(path))} ({digest(data)[:19]}…) sets:")
        for line in _what_it_sets(path.name, data) or ["(nothing)"]:
            out.print(f"  {escape(line)}")
    for path, data in instructions.items():
        out.print(f"{escape(str(path))} ({digest(data)[:19]}…) tells the model:")
        for line in _first_lines(data):
            out.print(f"  {escape(line)}")


def _belongs(path: Path, root: Path) -> bool:
    """Whether a trusted path is one of this workspace's settings or instruction files."""
    from ..instructions import ROOT_FILES
    from ..instructions.nested import looked_at

    if path.parent == root:
        return path.name in WORKSPACE_FILES or path.name in ROOT_FILES
    if root not in path.parents:
        return False
    nested = path.name in ROOT_FILES and all(looked_at(p) for p in path.parent.relative_to(root).parts)
    return nested or path.parent in (root / ".shou", root / ".agents" / "commands") \
        or root / ".agents" / "skills" in path.parents


def _first_lines(data: bytes, count: int = 12) -> list[str]:
    """The start of an instruction file, printable, so the person sees what the model would be told."""
    from .render import printable

    lines = data.decode("utf-8", "replace").splitlines()
    shown = [printable(line)[:160] for line in lines[:count]]
    return [*shown, f"... ({len(lines) - count} more lines)"] if len(lines) > count else shown or ["(empty)"]


def _name(key: str) -> str:
    return key if key.isprintable() else repr(key)  # names come from the file: no terminal escapes
