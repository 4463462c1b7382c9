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
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from .errors import ConfigError
from .frozen import fast_init
from .glob import glob_could_start, glob_match

__all__ = ["Decision", "Outcome", "Policy", "Rule", "main_argument"]

Outcome = Literal["allow", "ask", "deny"]
_RULE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\((.*)\))?\s*$", re.S)
# The argument a rule's pattern is matched against, per built-in tool; other tools: their first string one.
_MAIN = {"shell": "command", "run_code": "code", "read_file": "path", "write_file": "path", "edit_file": "path",
         "list_files": "pattern", "web_fetch": "url", "web_search": "query", "browser": "url",
         "save_memory": "content", "search_memory": "query"}
_HOST_OF = frozenset({"web_fetch", "browser"})
SANDBOXED = frozenset({"shell", "run_code"})
CODE_TOOL = "python"  # code mode's one tool (shou.agent.code)


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
        # Not fnmatch: its regex backtracks, and the model picks the argument (src/shou/glob.py).
        return self.pattern is None or glob_match(argument, self.pattern)

    def could_match(self, tool: str, start: str) -> bool:
        """Whether the rule covers some call of `tool` whose main argument starts with `start`."""
        if self.tool != tool and self.tool != "*":
            return False
        return self.pattern is None or glob_could_start(start, self.pattern)

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"


@fast_init
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
    """The host a browser or HTTP client would reach for `url` (shou.net.hostname): backslashes read as
    slashes (as browsers do), percent-decoded, UTS #46-mapped (`ｌｏｃａｌｈｏｓｔ` is `localhost`), lowercase,
    punycode, no trailing dot, and numeric IPv4 spellings (`167772161`, `0x0a000001`, `10.1`) dotted."""
    from .net.hostname import BadHost, canonical_host

    text = url.strip().replace("\\", "/")
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        if host and ":" in host:
            host = f"[{host}]"
    except ValueError:
        return text
    if not host:
        return text
    try:
        return canonical_host(host)
    except BadHost:  # no browser reaches it; rules still see it as it is written
        return host.rstrip(".").lower()


# Shell syntax that chains or substitutes commands: `git status; rm -rf ~` must not pass as `git status*`.
_CHAINING = re.compile(r"[;&|`<>\n\r]|\$\(|\$\{")

def _smuggles(tool: str, argument: str, rule: Rule) -> bool:
    """Whether an allow pattern would let a second command ride along: for `shell`, a command with more
    chaining, piping, redirecting or substituting than the pattern itself has."""
    if tool != "shell" or rule.pattern is None:
        return False
    return len(_CHAINING.findall(argument)) > len(_CHAINING.findall(rule.pattern))


def commands_in(line: str) -> list[str]:
    """The commands of a shell line as a rule should see them (shou.shellwords: every program the line runs,
    by its name, its words as bash reads them, through wrappers and shells given their script)."""
    from .shellwords import programs

    return programs(line).commands


def _views(tool: str, argument: str) -> tuple[list[str], list[str], list[str]]:
    """What deny and ask rules are matched against: the argument, and for a shell line each command it
    runs; and why some program of the line cannot be known before it runs (shou.shellwords)."""
    if tool in _HOST_OF:  # an IPv6 form of an IPv4 address reaches that address: rules on it apply
        return [argument, *_embedded_ipv4(argument)], [], []
    if tool != "shell":
        return [argument], [], []
    from .shellwords import programs

    found = programs(argument)
    return [argument, *found.commands], found.opaque, found.partial


def _host_rule(rule: Rule) -> Rule:
    """A rule on a URL's host, its pattern spelled as hosts are compared (`LOCALHOST.` is `localhost`)."""
    if rule.tool not in _HOST_OF or not rule.pattern:
        return rule
    pattern = rule.pattern.strip().lower().rstrip(".")
    if not re.search(r"[*?\[]", pattern):
        from .net.hostname import BadHost, canonical_host

        with contextlib.suppress(BadHost):
            pattern = canonical_host(pattern)
    return Rule(rule.tool, pattern)


def _embedded_ipv4(host: str) -> list[str]:
    import ipaddress

    from .net.address import _embedded

    try:
        addr = ipaddress.IPv6Address(host)
    except ValueError:
        return []
    inner = _embedded(addr)
    return [] if inner is None else [str(inner[0])]


class Policy:
    """Rules by outcome, plus the defaults (see the module docstring)."""

    def __init__(self, allow: Iterable[str] = (), ask: Iterable[str] = (), deny: Iterable[str] = (), *,
                 sandbox: str = "auto") -> None:
        self.rules: dict[Outcome, list[Rule]] = {
            "deny": [_host_rule(Rule.parse(r)) for r in deny], "ask": [_host_rule(Rule.parse(r)) for r in ask],
            "allow": [_host_rule(Rule.parse(r)) for r in allow],
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
        a `deny`). Code mode's `python` runs code as `run_code` does, so it is judged as `run_code`: its rules,
        its default (ask when unsandboxed), its approvals."""
        if tool == CODE_TOOL:
            return self.decide("run_code", {"code": args.get("code", "")}, declared=declared, granted=granted,
                               workspace=workspace)
        argument = main_argument(tool, args, order, workspace)
        # For a shell line, deny and ask rules see each of its commands too: `true; rm -r x` and ` rm -r x`
        # are both an `rm -r x`.
        views, opaque, partial = _views(tool, argument)

        def hit(rule: Rule) -> bool:
            # A program only the running shell knows could be any: it meets every rule for the tool. A command
            # known up to a word the running line makes (`git $a`) meets every rule some such command would.
            return ((bool(opaque) and rule.tool in (tool, "*")) or any(rule.matches(tool, v) for v in views)
                    or any(rule.could_match(tool, p) for p in partial))

        deny = next((r for r in self.rules["deny"] if hit(r)), None)
        if deny is not None:
            seen = "" if not opaque else f" (the line runs {opaque[0]}; deny rules cannot see what that is)"
            return Decision("deny", f"rule deny = {deny}{seen}", deny)
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
