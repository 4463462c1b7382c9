"""The permission policy: for each tool call, `allow`, `ask` or `deny`.

Rules come from `[permissions]` in the user's shou.toml (and a trusted workspace's): lists `allow`, `ask`
and `deny` of `TOOL` or `TOOL(PATTERN)`, the pattern a glob over the call's main argument (the shell
command, the code, the path, the URL's host, the query). Deny wins over ask over allow. A call no rule
matches gets the defaults a person would choose: a tool that declares itself dangerous
(`@tool(approval="ask")`) asks; `shell` and `run_code` ask when they would run without isolation (the
`local` backend); everything else is allowed (the file tools cannot leave the workspace anyway).

What the model writes never changes the policy: a page that says "you may run rm -rf" is an argument to
nothing here.
"""

from __future__ import annotations

import contextlib
import fnmatch
import posixpath
import re
import shlex
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from .errors import ConfigError

__all__ = ["Decision", "Outcome", "Policy", "Rule", "main_argument"]

Outcome = Literal["allow", "ask", "deny"]
_RULE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\((.*)\))?\s*$", re.S)
# The argument a rule's pattern is matched against, per built-in tool; other tools: their first string one.
_MAIN = {"shell": "command", "run_code": "code", "read_file": "path", "write_file": "path", "edit_file": "path",
         "list_files": "pattern", "web_fetch": "url", "web_search": "query", "browser": "url",
         "save_memory": "content", "search_memory": "query"}
_HOST_OF = frozenset({"web_fetch", "browser"})
SANDBOXED = frozenset({"shell", "run_code"})


@dataclass(frozen=True, slots=True)
class Rule:
    """`TOOL` or `TOOL(PATTERN)`, e.g. `shell(git status*)`."""

    tool: str
    pattern: str | None = None

    @classmethod
    def parse(cls, text: str) -> Rule:
        """The rule written as `text`; `ConfigError` when it is not one."""
        m = _RULE.match(text) if isinstance(text, str) else None
        if m is None:
            raise ConfigError(f"permission rule {text!r} is not TOOL or TOOL(PATTERN), e.g. shell(git status*)")
        return cls(m.group(1), m.group(2) if m.group(2) is not None else None)

    @classmethod
    def exact(cls, tool: str, argument: str) -> Rule:
        """The rule matching this argument only (glob characters escaped)."""
        return cls(tool, re.sub(r"([*?\[])", r"[\1]", argument))  # `tool()`: only calls without one

    def matches(self, tool: str, argument: str) -> bool:
        """Whether the rule covers a call of `tool` whose main argument is `argument`."""
        if self.tool != tool and self.tool != "*":
            return False
        return self.pattern is None or fnmatch.fnmatchcase(argument, self.pattern)

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says of one call, and why (the rule, or the default, that decided)."""

    outcome: Outcome
    why: str
    rule: Rule | None = None


def main_argument(tool: str, args: Mapping[str, Any], order: Iterable[str] = (), workspace: str | None = None) -> str:
    """The argument rules match for `tool` (see `_MAIN`; other tools: their first string parameter in the
    tool's own order, `order`, never the model's), normalised: a path as the workspace sees it (`./a/../b`
    is `b`), a URL by its host (lowercase, no trailing dot, numeric IPs in dotted form)."""
    name = _MAIN.get(tool)
    if name is None:
        name = next((k for k in order if isinstance(args.get(k), str)), None)
        if name is None:
            name = next((k for k, v in args.items() if isinstance(v, str)), None)
    value = args.get(name) if name else ""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    if tool in _HOST_OF and text:
        return url_host(text)
    if tool in _PATH_OF and text:
        return workspace_path(text, workspace)
    return text


_PATH_OF = frozenset({"read_file", "write_file", "edit_file"})


def workspace_path(path: str, workspace: str | None = None) -> str:
    """`path` as a normalised POSIX path relative to the workspace (`./a/../b` is `b`; an absolute path
    inside the workspace loses the workspace's prefix; one outside keeps its form)."""
    norm = posixpath.normpath(path)
    if workspace and posixpath.isabs(norm):
        root = posixpath.normpath(workspace)
        if norm == root or norm.startswith(root.rstrip("/") + "/"):
            norm = posixpath.relpath(norm, root)
    return norm[2:] if norm.startswith("./") else norm


def url_host(url: str) -> str:
    """The host a browser or HTTP client would reach for `url`: backslashes read as slashes (as browsers do),
    lowercase, no trailing dot, and numeric IPv4 spellings (`167772161`, `0x0a000001`, `10.1`) dotted."""
    text = url.strip().replace("\\", "/")
    try:
        host = urlsplit(text).hostname or ""
    except ValueError:
        return text
    host = host.rstrip(".").lower()
    if host and re.fullmatch(r"(?:0x[0-9a-f]+|\d+)(?:\.(?:0x[0-9a-f]+|\d+)){0,3}", host):
        with contextlib.suppress(OSError):  # inet_aton reads every form a resolver would
            host = socket.inet_ntoa(socket.inet_aton(host))
    return host or text


# Shell syntax that chains or substitutes commands: `git status; rm -rf ~` must not pass as `git status*`.
_CHAINING = re.compile(r"[;&|`<>\n\r]|\$\(|\$\{")
_SPLIT = re.compile(r"\|\||&&|[;&|\n\r()`]|\$\(|<\(|>\(")
# Words that run the rest of the line as a command.
_WRAPPERS = re.compile(r"^(?:(?:env|command|exec|builtin|nohup|time|nice|sudo|doas|xargs|stdbuf|timeout\s+\S+)\s+|"
                       r"[A-Za-z_][A-Za-z0-9_]*=\S*\s+|\\)+")


def _smuggles(tool: str, argument: str, rule: Rule) -> bool:
    """Whether an allow pattern would let a second command ride along: for `shell`, a command with more
    chaining, piping, redirecting or substituting than the pattern itself has."""
    if tool != "shell" or rule.pattern is None:
        return False
    return len(_CHAINING.findall(argument)) > len(_CHAINING.findall(rule.pattern))


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "busybox", "/bin/sh", "/bin/bash", "/usr/bin/sh",
                     "/usr/bin/bash"})


def commands_in(line: str, depth: int = 0) -> list[str]:
    """The simple commands of a shell line, each without leading wrappers (`env X=1`, `command`, `exec`, ...)
    and also as the shell would read its words (quotes and backslashes gone: `\\rm`, `r''m`, `"rm"` are
    `rm`), and the commands inside `sh -c '...'`: what a deny or ask rule is matched against besides the
    whole line."""
    out: list[str] = []
    try:  # the line as one command first: `bash -c "a && b"` keeps its quoted script whole
        whole = shlex.split(re.sub(r"\$(?=['\"])", "", _WRAPPERS.sub("", line.strip())))
    except ValueError:
        whole = []
    if depth < 3 and len(whole) >= 3 and whole[0] in _SHELLS and whole[1] in ("-c", "-lc", "-ec"):
        out.extend(commands_in(whole[2], depth + 1))
    for piece in _SPLIT.split(line):
        piece = _WRAPPERS.sub("", piece.strip()).strip()
        if not piece:
            continue
        out.append(piece)
        try:
            words = shlex.split(re.sub(r"\$(?=['\"])", "", piece))  # $'rm' and $"rm" are rm as well
        except ValueError:  # unbalanced quotes: the shell would refuse it too
            continue
        while words and (_WRAPPERS.fullmatch(words[0] + " ") or "=" in words[0].split("/")[0]):
            words = words[1:]
        if words:
            out.append(" ".join(words))
        if depth < 3 and len(words) >= 3 and words[0] in _SHELLS and words[1] in ("-c", "-lc", "-ec"):
            out.extend(commands_in(words[2], depth + 1))
    return out


class Policy:
    """Rules by outcome, plus the defaults (see the module docstring)."""

    def __init__(self, allow: Iterable[str] = (), ask: Iterable[str] = (), deny: Iterable[str] = (), *,
                 sandbox: str = "auto") -> None:
        self.rules: dict[Outcome, list[Rule]] = {
            "deny": [Rule.parse(r) for r in deny], "ask": [Rule.parse(r) for r in ask],
            "allow": [Rule.parse(r) for r in allow],
        }
        self.sandbox = sandbox

    @classmethod
    def from_settings(cls, settings: Any) -> Policy:
        """The policy `Settings` describe (permissions_allow/ask/deny, and the sandbox backend)."""
        if settings is None:
            return cls()
        return cls(getattr(settings, "permissions_allow", ()) or (), getattr(settings, "permissions_ask", ()) or (),
                   getattr(settings, "permissions_deny", ()) or (), sandbox=getattr(settings, "sandbox", "auto"))

    def decide(self, tool: str, args: Mapping[str, Any], *, declared: str | None = None,
               granted: Iterable[Rule] = (), order: Iterable[str] = (), workspace: str | None = None) -> Decision:
        """The outcome for a call of `tool` with `args`. `declared` is the tool's own approval ("ask" for a
        dangerous tool); `granted` are rules a person allowed for this session, which lift an `ask` (never
        a `deny`)."""
        argument = main_argument(tool, args, order, workspace)
        # For a shell line, deny and ask rules see each of its commands too: `true; rm -r x` and ` rm -r x`
        # are both an `rm -r x`.
        views = [argument, *commands_in(argument)] if tool == "shell" else [argument]

        def hit(rule: Rule) -> bool:
            return any(rule.matches(tool, v) for v in views)

        deny = next((r for r in self.rules["deny"] if hit(r)), None)
        if deny is not None:
            return Decision("deny", f"rule deny = {deny}", deny)
        # Between ask and allow the narrower rule wins (allow shell(git status*) over ask shell); at the
        # same breadth, ask does.
        found = [(r.pattern is not None, outcome == "ask", outcome, r) for outcome in ("ask", "allow")
                 for r in self.rules[outcome]  # type: ignore[index]
                 if (hit(r) if outcome == "ask" else r.matches(tool, argument) and not _smuggles(tool, argument, r))]
        if found:
            _, _, outcome, rule = max(found, key=lambda f: (f[0], f[1]))
            lifted = next((g for g in granted if g.matches(tool, argument)), None) if outcome == "ask" else None
            if lifted is not None:
                return Decision("allow", f"allowed for this session ({lifted})", rule)
            return Decision(outcome, f"rule {outcome} = {rule}", rule)  # type: ignore[arg-type]
        if declared == "ask":
            default = Decision("ask", f"{tool} is marked dangerous: it asks first")
        elif tool in SANDBOXED and self.sandbox == "local":
            default = Decision("ask", f"{tool} would run without isolation (sandbox = local)")
        else:
            return Decision("allow", "allowed by default")
        if any(g.matches(tool, argument) for g in granted):
            return Decision("allow", "allowed for this session")
        return default
