"""Every program a shell line runs, as deny and ask rules should see it, read with a real bash parser.

tree-sitter-bash parses the line; every command in the tree counts (pipelines, lists, subshells, `if`
and `case` bodies, functions, command and process substitutions), each with its words as bash reads them
(`\\rm`, `r''m`, `"rm"`, `$'\\x72m'` are `rm`; `/bin/rm` is `rm`). Wrappers are looked through to the
program they run (`env`, `exec`, `command`, `nice`, `timeout`, `sudo`, `xargs`, `find -exec`, ...), and
so are shells given their script statically (`bash -c '...'`, `bash <<< '...'`, a here-document, `eval`,
`trap`). Where the program cannot be known before the line runs (a name made by an expansion such as `$a`
or `${x:-rm}`, a substitution as the name, a glob in the name, a shell reading a script file or a pipe,
`source`, a line the parser cannot read), the line is *opaque*: shou.permissions then treats it as
matching every deny rule for `shell` (or, without one, every ask rule). A deny list is still no sandbox:
`python -c`, `perl -e` or a program the agent wrote can delete too (README, SECURITY.md).
"""

from __future__ import annotations

import codecs
import functools
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Found", "programs"]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "fish"})
MAX_DEPTH = 4  # shells inside shells; deeper is opaque
# Wrappers: the options that take a separate value, and how many words (after the options) are not the program.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir"}), 0),
    "exec": (frozenset({"-a"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "unbuffer": (frozenset(), 0),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata", "-p", "-P", "-u"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "sudo": (frozenset({"-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host",
                        "-p", "--prompt", "-r", "--role", "-t", "--type", "-U", "--other-user", "-T",
                        "--command-timeout"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "flock": (frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "xargs": (frozenset({"-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n", "--max-args", "-P",
                         "--max-procs", "-s", "--max-chars", "--process-slot-var"}), 0),
    "busybox": (frozenset(), 0),
    "coproc": (frozenset(), 0),
    "unshare": (frozenset({"--map-user", "--map-group", "--setuid", "--setgid", "-S", "-G", "-R", "--root", "-w",
                           "--wd"}), 0),
    "nsenter": (frozenset({"-t", "--target", "-S", "--setuid", "-G", "--setgid"}), 0),
    "setpriv": (frozenset({"--reuid", "--regid", "--groups", "--inh-caps", "--bounding-set"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "strace": (frozenset({"-o", "-e", "-p", "-s", "-u", "-E", "-I", "-P", "-S", "-X", "-a", "-b"}), 0),
    "ltrace": (frozenset({"-o", "-e", "-p", "-s", "-u", "-a", "-n", "-l", "-L"}), 0),
    "prlimit": (frozenset({"-p", "--pid"}), 0),
    "firejail": (frozenset(), 0),
    "runuser": (frozenset({"-u", "--user", "-g", "--group", "-G", "--supp-group", "-s", "--shell"}), 0),
    "catchsegv": (frozenset(), 0),
    "faketime": (frozenset({"-f"}), 1),
    "proxychains": (frozenset({"-f"}), 0),
    "torsocks": (frozenset(), 0),
    "then": (frozenset(), 0), "do": (frozenset(), 0), "else": (frozenset(), 0),
}
_EXEC_FLAGS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_GLOB = re.compile(r"(?<!\\)(?:[*?]|\[[^\]]+\])")  # `[` alone is the test command, no pattern
_BRACES = re.compile(r"\{[^{}]*,[^{}]*\}")

Word = tuple[str | None, str]  # (the word as bash reads it, or None when only the running line knows; the text)


@dataclass
class Found:
    """The commands of a line (each `program arg...`, the program by its name) and, when some program
    cannot be known statically, why (`opaque`)."""

    commands: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)


@functools.cache
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def programs(line: str) -> Found:
    """Every program `line` runs (see the module docstring)."""
    found = Found()
    try:
        _parser()
    except ImportError as e:  # a broken install: nothing can be read, so nothing is vouched for
        found.opaque.append(f"the bash parser is missing ({e})")
        return found
    _line(line, found, 0)
    return found


def _line(line: str, found: Found, depth: int) -> None:
    if depth > MAX_DEPTH:
        found.opaque.append("shells nested too deep to read")
        return
    line = line.replace("\\\n", "")  # a line continuation joins the words around it, even mid-word
    root = _parser().parse(line.encode("utf-8", "surrogatepass")).root_node
    if root.has_error:  # bash may still run the part before the mistake: read what parsed, vouch for nothing
        found.opaque.append("a line the bash parser cannot read")
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "command":
            _command(node, found, depth)
        stack.extend(reversed(node.children))


def _text(node: Any) -> str:
    return node.text.decode("utf-8", "surrogatepass")


def _static(node: Any) -> str | None:
    """A word as bash reads it, or None when it depends on the running shell (expansions, substitutions)."""
    kind, text = node.type, _text(node)
    if kind == "word":
        return re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.S)
    if kind == "number":
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "ansi_c_string":
        try:
            return codecs.decode(text[2:-1], "unicode_escape")
        except (UnicodeDecodeError, ValueError):
            return None
    if kind in ("string", "translated_string"):
        return _quoted(node)
    if kind in ("concatenation", "command_name"):
        pieces = [_static(c) for c in node.children]
        return None if any(p is None for p in pieces) else "".join(p or "" for p in pieces)
    return None


def _quoted(node: Any) -> str | None:
    """A double-quoted string's text, or None when it holds an expansion or a substitution."""
    parts = []
    for child in node.children:
        if child.type in ('"', '$"'):
            continue
        if child.type != "string_content":
            return None
        parts.append(re.sub(r'\\([$`"\\])', r"\1", _text(child).replace("\\\n", "")))
    return "".join(parts)


def _globbed(node: Any) -> bool:
    """Whether an unquoted glob character makes the word depend on the files there (`/bin/r?`)."""
    if node.type == "word":
        return bool(_GLOB.search(_text(node)))
    return any(_globbed(c) for c in node.children if c.type in ("word", "concatenation"))


def _stdin(node: Any) -> list[Any]:
    """The here-strings and here-documents given to the command `node`."""
    found = [c for c in node.children if c.type == "herestring_redirect"]
    parent = node.parent
    if parent is not None and parent.type == "redirected_statement":
        found += [c for c in parent.children if c.type in ("herestring_redirect", "heredoc_redirect")]
    return found


def _command(node: Any, found: Found, depth: int) -> None:
    name = node.child_by_field_name("name")
    if name is None:  # only assignments: `a=rm` runs nothing (their substitutions are visited on their own)
        return
    if _globbed(name):
        found.opaque.append(f"{_text(name)}: a program named by a glob")
        found.commands.append(_text(node))
        return
    argv: list[Word] = [(_static(name), _text(name))]
    argv += [(_static(a), _text(a)) for a in node.children_by_field_name("argument")]
    _run(argv, found, depth, _stdin(node))


def _run(argv: list[Word], found: Found, depth: int, stdin: list[Any]) -> None:
    """Record the command `argv` and look through it to what it runs."""
    while argv:
        head, raw = argv[0]
        if head is None:
            found.opaque.append(f"{raw}: a program named by an expansion or a substitution")
            found.commands.append(" ".join(r for _, r in argv))
            return
        if _BRACES.fullmatch(head):  # {rm,-r,x} is `rm -r x`
            argv = [(w, w) for w in head[1:-1].split(",")] + argv[1:]
            continue
        base = posixpath.basename(head)
        words = [base, *(s if s is not None else r for s, r in argv[1:])]
        found.commands.append(" ".join(words))
        rest = _through(base, argv[1:], found, depth, stdin)
        if rest is None:
            return
        argv = rest


Handler = Callable[[str, list[Word], Found, int, list[Any]], "list[Word] | None"]


def _opaque(why: str) -> Handler:
    def handle(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> None:
        found.opaque.append(f"{base}: {why}")

    return handle


def _eval(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> None:
    _script([s for s, _ in (args[:1] if base == "trap" else args)], found, depth, base)


def _watch(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> None:
    rest = _skip_options_of(args, frozenset({"-n", "--interval", "-d", "-q", "--equexit"}))
    _script([s for s, _ in rest], found, depth, base)  # it runs its words as one `sh -c` line


def _with_c(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[Word] | None:
    if _dash_c(args, found, depth, anywhere=True):  # su USER -c, script -c, flock FILE -c, runuser -c
        return None
    return _skip_options(base, args) if base in _WRAPPERS else None


def _xargs(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[Word]:
    rest = _skip_options(base, args)
    if rest and rest[0][0] is not None:  # it runs the program with words read from its input as well
        found.commands.append(" ".join([posixpath.basename(rest[0][0]), *(s or r for s, r in rest[1:]), "<input>"]))
    return rest


def _env(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[Word] | None:
    if any(s in ("-S", "--split-string") or (s or "").startswith("-S") for s, _ in args):
        found.opaque.append("env -S: a command line split at run time")
        return None
    return _skip_options(base, args)


def _coproc(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[Word]:
    return args[2:] if len(args) > 1 and args[1][0] == "{" else _skip_options(base, args)


_HANDLERS: dict[str, Handler] = {
    **{name: lambda b, a, f, d, i: _shell(a, f, d, i) for name in SHELLS},
    "eval": _eval, "trap": _eval, "watch": _watch, "xargs": _xargs, "env": _env, "coproc": _coproc,
    ".": _opaque("runs a script file shou cannot see"), "source": _opaque("runs a script file shou cannot see"),
    # A name that runs another program from now on.
    **{name: _opaque("makes a name run another program") for name in ("alias", "hash", "enable")},
    **{name: _with_c for name in ("su", "script", "flock", "runuser")},
    "find": lambda b, a, f, d, i: _find(a, f, d),
}


def _through(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[Word] | None:
    """The command `base args` runs in turn (a wrapper's program), or None after reading what it runs."""
    handler = _HANDLERS.get(base)
    if handler is not None:
        return handler(base, args, found, depth, stdin)
    return _skip_options(base, args) if base in _WRAPPERS else None


def _script(words: list[str | None], found: Found, depth: int, what: str) -> None:
    """Read `words`, joined by spaces, as the shell line they become (`eval`, `trap`, `watch`)."""
    if any(w is None for w in words):
        found.opaque.append(f"{what} of words only the running shell knows")
    elif words:
        _line(" ".join(w or "" for w in words), found, depth + 1)


def _skip_options_of(args: list[Word], takes_value: frozenset[str]) -> list[Word]:
    i = 0
    while i < len(args) and (args[i][0] or "").startswith("-"):
        i += 2 if args[i][0] in takes_value else 1
    return args[i:]


def _skip_options(base: str, args: list[Word]) -> list[Word]:
    """A wrapper's words without its options, their values, assignments (env) and leading operands."""
    takes_value, operands = _WRAPPERS[base]
    i = 0
    while i < len(args):
        word = args[i][0]
        if word is None:
            break
        if word == "--":
            i += 1
            break
        if base == "env" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word, flags=re.S):
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            if base == "nice" and re.fullmatch(r"[+-]?\d+", word):
                i += 1
                continue
            break
        i += 2 if word in takes_value else 1
    return args[i + operands:]


def _dash_c(args: list[Word], found: Found, depth: int, anywhere: bool = False) -> bool:
    """Read the script of `-c SCRIPT` (any option cluster holding `c`, before the first operand unless
    `anywhere`, as `su USER -c` has it); whether there was one."""
    for i, (word, _) in enumerate(args):
        if word is None or not word.startswith("-") or word == "-":
            if anywhere:
                continue
            return False
        if word.startswith("--") or "c" not in word[1:]:
            continue
        script = args[i + 1][0] if i + 1 < len(args) else ""
        if script is None:
            found.opaque.append("a shell given a script only the running shell knows")
        else:
            _line(script, found, depth + 1)
        return True
    return False


def _shell(args: list[Word], found: Found, depth: int, stdin: list[Any]) -> None:
    if _dash_c(args, found, depth):
        return
    if any(w is None or not w.startswith("-") for w, _ in args):
        found.opaque.append("a shell running a script file shou cannot see")
        return
    if not stdin:
        found.opaque.append("a shell reading commands from its input")
        return
    for redirect in stdin:
        script = _redirect_text(redirect)
        if script is None:
            found.opaque.append("a shell reading a here-string only the running shell knows")
        else:
            _line(script, found, depth + 1)


def _redirect_text(redirect: Any) -> str | None:
    if redirect.type == "heredoc_redirect":
        body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
        return "" if body is None else _text(body)
    value = next((c for c in reversed(redirect.children) if c.type not in ("<<<",)), None)
    return None if value is None else _static(value)


def _find(args: list[Word], found: Found, depth: int) -> None:
    """`find ... -exec CMD {} ;` runs CMD (as do -execdir, -ok and -okdir)."""
    i = 0
    while i < len(args):
        if args[i][0] in _EXEC_FLAGS:
            end = next((j for j in range(i + 1, len(args)) if args[j][0] in (";", "+")), len(args))
            _run(args[i + 1:end], found, depth, [])
            i = end
        i += 1
