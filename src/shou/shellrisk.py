"""What in a shell line can run a command that no command word names (shou.shellwords makes such a line opaque).

Two kinds, each found in one parsed line:

- Arithmetic evaluates array subscripts, and a subscript may hold `$(...)`: `let 'a[$(rm x)]'`, `${c[a]}`,
  `${!a}`, `${@:a}`, `c=([a]=1)`,
  `test -v 'a[$(rm x)]'`, `x='a[$(rm x)]'; echo $((x))`, `printf -v`, `read`, `declare`, `[[ -v ]]`. Bash
  evaluates what is inside the quotes later, so a line with any arithmetic context and any literal holding
  `$(` or a backtick is opaque (an over-approximation: deny rules may refuse it, never miss it). Arithmetic on a
  value the line does not set statically (a file name, input, a substitution) is found by shou.shellarith.
- Start-up variables and callbacks make a shell or a builtin run a string: BASH_ENV, ENV, BASH_FUNC_*, PS0-PS4,
  PROMPT_COMMAND, SHELLOPTS, BASHOPTS (assigned, exported or given to `env`), `mapfile -C`/`readarray -C`,
  and prompt expansion `${x@P}`, which runs the `$(...)` in x's value wherever it came from (always opaque).
- An unquoted here-document's substitutions the parser did not read (backticks, a `<<-` body).
"""

from __future__ import annotations

import re
from typing import Any

from .bashwords import node_text, static_word
from .shellarith import Arithmetic

__all__ = ["Risk"]

# Builtins that evaluate a word as arithmetic or as a variable name with a subscript.
_ARITH_COMMANDS = frozenset({"let", "test", "[", "[[", "read", "declare", "typeset", "local", "export", "readonly",
                             "mapfile", "readarray", "unset", "wait", "shift", "return", "exit", "ulimit"})
_ARITH_NODES = frozenset({"arithmetic_expansion", "test_command", "declaration_command", "unset_command",
                          "c_style_for_statement"})
_LITERALS = frozenset({"word", "raw_string", "string_content", "ansi_c_string", "heredoc_body"})
_STARTUP = re.compile(r"(?:BASH_ENV|ENV|BASH_FUNC_.*|PS[0-4]|PROMPT_COMMAND|SHELLOPTS|BASHOPTS)"
                      r"(?:\[.*\])?(?:%%)?(?:\+?=.*)?", re.S)


_NAMERS = frozenset({"read", "getopts", "mapfile", "readarray", "printf"})  # builtins that set a variable by name


class Risk:
    """Collects, node by node, the marks of a line that can run a hidden command (see the module docstring)."""

    def __init__(self) -> None:
        self.arith = False
        self.inner = False
        self.startup: list[str] = []
        self.prompt = False
        self.heredoc = False
        self.arithmetic = Arithmetic()

    def see(self, node: Any) -> None:
        """Look at one node of the parsed line."""
        kind = node.type
        self.arithmetic.see(node)
        if kind in _ARITH_NODES or (kind == "compound_statement" and node.text.startswith(b"((")) or _evaluates(node):
            self.arith = True
        elif kind == "expansion" and _operators(node)[-2:] == ["@", "P"]:
            self.prompt = True
        elif kind == "expansion" and {":=", "="} & set(_operators(node)):  # `${PS4:='$(rm x)'}` assigns PS4
            name = next((c for c in node.children if c.type == "variable_name"), None)
            if name is not None and _STARTUP.fullmatch(node_text(name)):
                self.startup.append(node_text(name))
        elif kind == "heredoc_redirect" and _unread_heredoc(node):
            self.heredoc = True
        if kind == "declaration_command":  # also an arithmetic context, above
            self.startup += _declared_startup(node)
        elif kind == "for_statement":  # `for PS4 in '$(rm x)'; do set -x; ...` assigns it too
            variable = node.child_by_field_name("variable")
            if variable is not None and _STARTUP.fullmatch(node_text(variable)):
                self.startup.append(node_text(variable))
        elif kind in _LITERALS and (b"$(" in node.text or b"`" in node.text or b"\\x" in node.text
                                    or b"\\0" in node.text or b"\\u" in node.text):
            self.inner = True  # escapes may spell `$(` once decoded
        elif kind == "variable_assignment":
            name = node.child_by_field_name("name")
            text = "" if name is None else name.text.decode("utf-8", "replace")
            if _STARTUP.fullmatch(text.split("[", 1)[0]):
                self.startup.append(text)

    def command(self, argv: list[tuple[str | None, str]], node: Any) -> None:
        """Look at one command's words (the name first, as bash reads them, None when only known at run time)
        at `node`."""
        self.arithmetic.command(argv, node)
        name = argv[0][0] or ""
        base = name.rsplit("/", 1)[-1]
        if base in _ARITH_COMMANDS or (base == "printf" and any((w or r).startswith("-v") for w, r in argv[1:])):
            self.arith = True
        # A builtin that sets variables named by its words (`v=PS4; read $v < f; set -x`): a name only the
        # running shell knows may be a start-up variable. Found past wrappers (`builtin read $v`).
        statics = [(w or "").rsplit("/", 1)[-1] for w, _ in argv]
        setter = next((k for k, w in enumerate(statics) if w in _NAMERS), None)
        if setter is not None:
            rest = argv[setter + 1:]
            if statics[setter] == "printf":  # only its -v NAME
                rest = [rest[k + 1] for k, (w, _) in enumerate(rest[:-1]) if w == "-v"]
            if any(w is None for w, _ in rest):
                self.startup.append(f"{statics[setter]}: a variable named at run time")
        for word, raw in argv[1:]:
            text = word if word is not None else raw
            if _STARTUP.fullmatch(text.lstrip("-")):
                self.startup.append(text)
            if base in ("mapfile", "readarray") and text.startswith("-") and "C" in text:
                self.startup.append(f"{base} -C")

    def reasons(self) -> list[str]:
        """Why the line is opaque, if it is."""
        out = []
        if self.prompt:
            out.append("a prompt expansion (`${x@P}`) that runs the `$(...)` its value holds")
        if self.heredoc:
            out.append("a here-document whose substitutions the bash parser did not read")
        if self.arith and self.inner:
            out.append("arithmetic that may evaluate a quoted `$(...)` or backtick")
        out += self.arithmetic.reasons()
        out += [f"{s.split('=', 1)[0]}: a start-up variable or callback that runs a string" for s in self.startup[:1]]
        return out


def _operators(node: Any) -> list[str]:
    return [node.children[i].type for i in range(node.child_count) if node.field_name_for_child(i) == "operator"]


def _evaluates(node: Any) -> bool:
    """Whether `node` evaluates a subscript or a variable's value as arithmetic: an array subscript (`${c[a]}`,
    `c[a]=1`, `c=([a]=1)`), indirection (`${!a}`, whose value may be `b[$(...)]`), or an offset or length
    (`${@:a}`, `${x:1:n}`)."""
    kind = node.type
    if kind == "subscript":
        return True
    if kind == "array":
        return any(c.text.startswith(b"[") for c in node.children)
    if kind == "expansion":
        operators = _operators(node)
        return "!" in operators or ":" in operators
    return False


# In an unquoted here-document bash runs `$(...)`, backticks, `${...}` and `$[...]`; `\\` escapes `$`, `` ` `` and `\\`.
_HEREDOC_SUBSTITUTION = re.compile(r"(?<!\\)(?:\\\\)*(?:`|\$[({\[])")
_PARSED = frozenset({"command_substitution", "expansion", "arithmetic_expansion", "simple_expansion"})


def _unread_heredoc(redirect: Any) -> bool:
    """Whether an unquoted here-document's body holds a substitution the parser did not make a node of: it
    reads no backticks there, and nothing of a `<<-` body; bash runs them all."""
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    if start is not None and re.search(rb"['\"\\]", start.text):
        return False  # `<<'E'`: bash expands nothing in the body
    for body in (c for c in redirect.children if c.type == "heredoc_body"):
        text, at = b"", body.start_byte
        for child in body.children:  # the body's text outside the substitutions the parser did read
            if child.type in _PARSED:
                text += body.text[at - body.start_byte:child.start_byte - body.start_byte]
                at = child.end_byte
        text += body.text[at - body.start_byte:]
        if _HEREDOC_SUBSTITUTION.search(text.replace(b"\\\n", b"").decode("utf-8", "replace")):
            return True
    return False


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[.*\])?", re.S)


def _declared_startup(node: Any) -> list[str]:
    """The start-up variables `export`, `declare`, `local`, `readonly`, `typeset` set, each word read as bash reads
    it (`export 'BASH_ENV=f'`, `export "BASH_ENV"=f`, `export BASH_E\\NV=f`), a name bash makes at run time
    (`export $v=f`) counted as one, and a nameref's target (`declare -n r=BASH_ENV`)."""
    out = []
    for child in node.named_children:
        if child.type == "variable_assignment":  # its name is seen on its own; a nameref's target is its value
            value = child.child_by_field_name("value")
            words = [] if value is None else [static_word(value)]
        else:
            # `export BASH_ENV` exports a value set some way no assignment shows (`for BASH_ENV in f`, `read`)
            words = [node_text(child) if child.type == "variable_name" else static_word(child)]
            if words[0] is None:
                name = node_text(child).split("=", 1)[0]
                if not _NAME.fullmatch(name):
                    out.append(node_text(child))  # a name only the running shell knows may be BASH_ENV
                continue
        out += [w for w in words if w is not None and _STARTUP.fullmatch(w.lstrip("-"))]
    return out
