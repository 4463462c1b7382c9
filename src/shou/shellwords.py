"""Every program a shell line runs, as deny and ask rules should see it, read with a real bash parser.

tree-sitter-bash parses the line; every command in the tree counts (pipelines, lists, subshells, `if`
and `case` bodies, functions, command and process substitutions), each with its words as bash reads them
(`\\rm`, `r''m`, `"rm"`, `$'\\x72m'` are `rm`; `/bin/rm` is `rm`; words after a redirect are the command's,
`git 2>&1 push` is `git push`; braces are expanded, `r{m,} x` is `rm r x`). Wrappers are looked through to the
program they run (`env`, `exec`, `command`, `nice`, `timeout`, `sudo`, `xargs`, `find -exec`, ...), and
so are shells given their script statically (`bash -c '...'`, `bash <<< '...'`, a here-document, `eval`,
`trap`). Where the program cannot be known before the line runs (a name made by an expansion such as `$a`
or `${x:-rm}`, a substitution as the name, a glob in the name, a shell reading a script file or a pipe,
`source`, a line the parser cannot read), or arithmetic evaluates a value the line does not set statically
(shou.shellarith), the line is *opaque*: shou.permissions then treats it as matching every deny rule for
`shell` (or, without one, every ask rule). A deny list is still no sandbox:
`python -c`, `perl -e` or a program the agent wrote can delete too (README, SECURITY.md).
"""

from __future__ import annotations

import itertools
import posixpath
import re
from typing import Any

from .bashwords import GLOB, BraceUnreadable, brace_words, globbed, node_text, redirect_text, static_word, stdin_of
from .shellparse import (
    _FD_WORD,
    Found,
    Word,
    _Exhausted,
    _parse,
    _parser,
    _partial,
    _place_redirected_words,
    _record,
    _redirects,
    _spend,
)
from .shellprograms import (
    _BUILTIN_RUNNERS,
    _COMPGEN_VALUES,
    _EXEC_FLAGS,
    _LOADER,
    _WRAPPERS,
    OTHER_SHELLS,
    SHELLS,
    Handler,
    _dash_c,
    _env,
    _jobs,
    _opaque,
    _suffixes,
    _xargs_program,
    _xargs_replaced,
)
from .shellrisk import Risk

__all__ = ["Found", "programs"]

MAX_DEPTH = 4  # shells inside shells; deeper is opaque
MAX_LINE = 64 * 1024  # characters; a longer line is opaque
# Work a line may take, in nodes visited and characters of commands recorded: linear in its size, so the
# worst line is decided in a fraction of a second (wrappers make every suffix of their words a command).
WORK_PER_CHAR, WORK_BASE = 24, 200_000


def programs(line: str) -> Found:
    """Every program `line` runs (see the module docstring). Never raises: whatever stops the reading
    (a line too long, too much work, the parser failing) makes the line opaque."""
    found = Found(budget=WORK_PER_CHAR * len(line) + WORK_BASE)
    if len(line) > MAX_LINE:
        found.opaque.append(f"a line over {MAX_LINE} characters, too long to read")
        return found
    try:
        _parser()
    except ImportError as e:  # a broken install: nothing can be read, so nothing is vouched for
        found.opaque.append(f"the bash parser is missing ({e})")
        return found
    try:
        _line(line, found, 0)
    except _Exhausted:
        found.opaque.append("a line that takes too much work to read")
    except RecursionError:
        found.opaque.append("a line nested too deep to read")
    except Exception as e:  # a parser fault must fail closed, never end the run
        found.opaque.append(f"a line the bash parser failed on ({type(e).__name__})")
    return found


def _line(line: str, found: Found, depth: int) -> None:
    if depth > MAX_DEPTH:
        found.opaque.append("shells nested too deep to read")
        return
    line = line.replace("\\\n", "")  # a line continuation joins the words around it, even mid-word
    root = _parse(line.encode("utf-8", "surrogatepass"))
    if root.has_error:  # bash may still run the part before the mistake: read what parsed, vouch for nothing
        found.opaque.append("a line the bash parser cannot read")
    risk = Risk()
    extra: dict[int, list[Any]] = {}  # a command's words the parser put in a redirect after it (by node id)
    stack = [root]
    while stack:
        node = stack.pop()
        _spend(found, 1)
        risk.see(node)
        if node.type == "redirected_statement":
            _place_redirected_words(node, extra, found)
        if node.type == "command" or (node.id in extra and node.type == "redirected_statement"):
            _command(node, found, depth, risk, extra.get(node.id, []))
        stack.extend(reversed(node.children))
    found.opaque.extend(risk.reasons())


def _command(node: Any, found: Found, depth: int, risk: Risk, extra: list[Any]) -> None:
    """Read one command (or a redirected statement without one, whose words are all in its redirects) as bash
    does: its name and arguments, with the words the parser put in a redirect (see _redirect_words) in their
    place, and without a redirect's descriptor (`0<f`, `{fd}>f`)."""
    parent = node.parent
    redirects = _redirects(node)
    if node.type == "command" and parent is not None and parent.type == "redirected_statement":
        redirects += [n for r in parent.children_by_field_name("redirect") for n in (r, *_redirects(r))]
    starts = {r.start_byte for r in redirects}
    words = [c for i, c in enumerate(node.children) if node.field_name_for_child(i) in ("name", "argument")]
    words = sorted(words + extra, key=lambda w: w.start_byte)
    words = [w for w in words if not (w.end_byte in starts and _FD_WORD.fullmatch(node_text(w)))]
    if not words:  # only assignments: `a=rm` runs nothing (their substitutions are visited on their own)
        return
    # Nodes that touch are one bash word the parser split (it splits at braces: `1{\\{.` became `1{` and `{.`).
    groups: list[list[Any]] = []
    for w in words:
        if groups and groups[-1][-1].end_byte == w.start_byte:
            groups[-1].append(w)
        else:
            groups.append([w])
    if any(globbed(n) for n in groups[0]):
        found.opaque.append(f"{''.join(node_text(n) for n in groups[0])}: a program named by a glob")
        _record(found, node_text(node))
        return
    argv: list[Word] = []
    for group in groups:
        text = "".join(node_text(w) for w in group)
        try:  # bash expands braces inside a word first: `r{m,} x` runs `rm r x`, `git pu{s,}h` runs `git push puh`
            expanded = brace_words(group)
        except BraceUnreadable:
            found.opaque.append(f"{text[:40]}: a brace expansion too large or odd to read")
            expanded = [(None, text)]
        if expanded is None:
            pieces = [static_word(w) for w in group]
            expanded = [(None if None in pieces else "".join(p or "" for p in pieces), text)]
        argv += expanded
    if not argv:
        return
    risk.command(argv, node)
    _run(argv, found, depth, stdin_of(node))


def _run(argv: list[Word], found: Found, depth: int, stdin: list[Any]) -> None:
    """Record the command `argv` and look through it to what it runs: for a wrapper, every suffix of its
    words may be the program (each start is read once, so wrappers inside wrappers stay linear)."""
    seen: set[int] = set()
    todo = [0]
    while todo:
        start = todo.pop()
        if start in seen or start >= len(argv):
            continue
        seen.add(start)
        head, raw = argv[start]
        if head is None:
            found.opaque.append(f"{raw}: a program named by an expansion or a substitution")
            _record(found, " ".join(r for _, r in argv[start:]))
            continue
        base = posixpath.basename(head)
        args = argv[start + 1:]
        _record(found, " ".join([base, *(s if s is not None else r for s, r in args)]))
        unknown = next((k for k, (s, r) in enumerate(args) if s is None or _unquoted_glob(r)), None)
        if unknown is not None:
            _partial(found, [base, *(s or "" for s, _ in args[:unknown])])
        todo.extend(start + 1 + i for i in _through(base, args, found, depth, stdin))


_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|\\.", re.S)


def _unquoted_glob(raw: str) -> bool:
    """Whether a word's text holds a glob outside quotes (`pu?h` is whatever file names match: `push`)."""
    return bool(GLOB.search(_QUOTED.sub("", raw)))


def _scripts(base: str, args: list[Word], found: Found, depth: int, letters: str = "") -> None:
    """Read every word of `args` that is not an option, and every value attached to an option (`-c'...'`
    for a letter in `letters`, `--command=...`), each as a shell line: whichever the program runs, rules see."""
    for word, _ in args:
        if word is None:
            found.opaque.append(f"{base}: given words only the running shell knows")
        elif word.startswith("--"):
            if "=" in word:
                _line(word.split("=", 1)[1], found, depth + 1)
        elif word.startswith(("-", "+")) and len(word) > 1:
            for letter in letters:
                k = word.find(letter, 1)
                if k > 0 and word[k + 1:]:
                    _line(word[k + 1:], found, depth + 1)
        else:
            _line(word, found, depth + 1)


def _eval(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    words = [s for s, _ in args]
    _script(words[1:] if words[:1] == ["--"] else words, found, depth, base)
    return []


def _trap(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    _scripts(base, args, found, depth)  # the action and the signal names: reading a name as a line is harmless
    return []


def _watch(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    for i in _suffixes(base, args, found):  # it runs its words as one `sh -c` line
        _script([s for s, _ in args[i:]], found, depth, base)
    return []


def _with_c(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    _scripts(base, args, found, depth, "c")  # su -c'...', --command=, flock FILE -c, sg grp 'x', tmux new 'x'...
    return _suffixes(base, args, found) if base in _WRAPPERS else []


def _xargs(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """xargs runs its program with words from its input added (or put in place of `-I`'s string): a program that
    reads its words as a command (a shell, a wrapper, eval, find, another xargs) or a name `-I` replaces runs
    what the input says, which only the running line knows (`echo 'rm x' | xargs sh -c`)."""
    starts = _suffixes(base, args, found)
    replaced = _xargs_replaced(args)
    program_at = _xargs_program(args)
    for i in starts if program_at is None else [program_at]:
        name = args[i][0]
        program = posixpath.basename(name or "")
        if name is not None and (program in _WRAPPERS or program in _HANDLERS or program in _BUILTIN_RUNNERS
                                 or any(r and r in name for r in replaced)):
            found.opaque.append(f"{base} {program}: a command made of xargs's input")
    for i in starts if program_at is None else [program_at]:  # its input adds words, or takes -I's places
        words = [(s, r) for s, r in args[i:]]
        at = next((k for k, (s, r) in enumerate(words) if s is None or any(x and x in s for x in replaced)), None)
        if words and words[0][0] is not None:
            _partial(found, [posixpath.basename(words[0][0] or ""), *(s or "" for s, _ in words[1:at])])
    for i in starts:  # it runs the program with words read from its input as well
        if args[i][0] is not None:
            _record(found, " ".join([posixpath.basename(args[i][0] or ""), *(s or r for s, r in args[i + 1:]),
                                     "<input>"]))
    return starts


def _compgen(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """`compgen -C 'rm x' w` runs its `-C` command as a shell line (read like eval's); `-F f` calls a function by a
    name (opaque: shou does not follow names to functions). `complete` takes the same options."""
    i = 0
    while i < len(args):
        word = args[i][0]
        if word is None:  # `compgen $o 'rm x'`: $o may be -C
            found.opaque.append(f"{base}: given options only the running shell knows")
            break
        text = word
        if text == "--" or not text.startswith("-"):
            break
        for k, letter in enumerate(text[1:], 1):
            if letter not in _COMPGEN_VALUES:
                continue
            value = text[k + 1:] or (args[i + 1][0] if i + 1 < len(args) else "")
            if not text[k + 1:]:
                i += 1
            if letter in "CF":
                if letter == "F" or value is None:
                    found.opaque.append(f"{base} -{letter}: runs a command or function shou cannot read")
                else:
                    _line(value, found, depth + 1)
            break  # the option's value is the rest of this word or the next word (`-W x -C 'rm y'`)
        i += 1
    return []


def _attached(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """A wrapper whose program may be an option's attached value (`start-stop-daemon --exec=/bin/rm`, `-x/bin/rm`,
    `--startas=`; `capsh --shell=/bin/rm`): each such value is read as a program, given the words after `--`."""
    rest = next((k + 1 for k, (w, _) in enumerate(args) if w == "--"), len(args))
    for word, raw in args:
        text = word if word is not None else raw
        value = text.split("=", 1)[1] if text.startswith("--") and "=" in text else (
            text[2:] if len(text) > 2 and text.startswith("-") and text[1] != "-" else None)
        if value is not None:
            _run([(value if word is not None else None, value), *args[rest:]], found, depth, stdin)
    return _suffixes(base, args, found)


def _capsh(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """capsh runs bash (or its `--shell=`) with the words after `--`: `capsh -- -c 'rm x'`."""
    rest = next((k + 1 for k, (w, _) in enumerate(args) if w == "--"), None)
    if any(w is None or w == "==" for w, _ in args):
        found.opaque.append(f"{base}: runs a program shou cannot read")
    if rest is not None:
        _shell("bash", args[rest:], found, depth, stdin)
    return _attached(base, args, found, depth, stdin)


def _parallel(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """GNU parallel (and sem, hyperfine) runs its command through a shell, and with no command runs each of its
    arguments or input lines: every word is read as a shell line, and with none before `:::` or with only its
    input to read, what it runs is unknown."""
    _scripts(base, args, found, depth)
    before = next((k for k, (w, _) in enumerate(args) if w in (":::", "::::", ":::+", "::::+")), len(args))
    if base == "parallel" and not any(w is not None and not w.startswith("-") for w, _ in args[:before]):
        found.opaque.append(f"{base}: runs commands from its arguments or input")
    return _suffixes(base, args, found)


def _gdb(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """gdb runs its program (`gdb --args rm x`) and a shell line its `-ex 'shell rm x'` (or `!rm x`) names."""
    for (word, _), (command, _) in itertools.pairwise(args):
        if word in ("-ex", "--ex", "-iex", "--iex", "-eval-command", "--eval-command"):
            name, _, rest = (command or "").lstrip().partition(" ")
            if command is None or name.startswith("!") or name in ("shell", "pipe", "|"):
                _script([None] if command is None else [f"{name[1:]} {rest}" if name[:1] == "!" else rest], found,
                        depth, f"{base} -ex")
    return _suffixes(base, args, found)


def _find_handler(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    _find(args, found, depth)
    return []


_HANDLERS: dict[str, Handler] = {
    **{name: lambda b, a, f, d, i: _shell(b, a, f, d, i) for name in SHELLS},
    **{name: _opaque("a shell whose language shou does not read") for name in OTHER_SHELLS},
    "compgen": _compgen, "complete": _compgen, "jobs": _jobs, "start-stop-daemon": _attached, "capsh": _capsh,
    # They run each command they are given as a shell line (`parallel 'rm {}' ::: x`, `hyperfine 'rm x'`).
    **{name: _parallel for name in ("parallel", "sem", "hyperfine")},
    # `fc -s` (and `fc` with an editor) runs commands from the history, which `history -s` writes.
    "fc": _opaque("re-runs commands from the history"),
    "eval": _eval, "trap": _trap, "watch": _watch, "xargs": _xargs, "env": _env, "find": _find_handler,
    ".": _opaque("runs a script file shou cannot see"), "source": _opaque("runs a script file shou cannot see"),
    # A name that runs another program from now on.
    **{name: _opaque("makes a name run another program") for name in ("alias", "hash", "enable")},
    **{name: _with_c for name in ("su", "script", "flock", "runuser", "sg", "tmux", "nix-shell")},
    "newgrp": _opaque("starts a shell reading its input"), "gdb": _gdb,
}


def _through(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """Where among `args` a command `base` runs in turn may start (a wrapper's program), after reading
    what it runs as a line (a shell's script, eval's words)."""
    handler = _HANDLERS.get(base)
    if handler is not None:
        return handler(base, args, found, depth, stdin)
    return _suffixes(base, args, found) if base in _WRAPPERS or _LOADER.fullmatch(base) else []


def _script(words: list[str | None], found: Found, depth: int, what: str) -> None:
    """Read `words`, joined by spaces, as the shell line they become (`eval`, `watch`)."""
    if any(w is None for w in words):
        found.opaque.append(f"{what} of words only the running shell knows")
    elif words:
        _line(" ".join(w or "" for w in words), found, depth + 1)


def _shell(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """A shell: its `-c` script (every word after the options read as one, in case), or its here-string or
    quoted here-document; a script file, its input or an unquoted here-document (which the outer shell
    expands first) is opaque."""
    operand = next((i for i, (w, _) in enumerate(args) if w is None or not w.startswith(("-", "+"))), None)
    c = _dash_c(args)
    script_file = any(w is not None and w.split("=", 1)[0] in ("--rcfile", "--init-file") for w, _ in args)
    if c is not None:
        _scripts(base, args, found, depth, "c")
        if (operand is not None and operand < c) or script_file:
            found.opaque.append("a shell running a script file shou cannot see")
        return []
    if operand is not None or script_file:
        found.opaque.append("a shell running a script file shou cannot see")
        return []
    if not stdin:
        found.opaque.append("a shell reading commands from its input")
        return []
    for redirect in stdin:
        script = redirect_text(redirect)
        if script is None:
            found.opaque.append("a shell reading a here-string or here-document only the running shell knows")
        else:
            _line(script, found, depth + 1)
    return []


def _find(args: list[Word], found: Found, depth: int) -> None:
    """`find ... -exec CMD {} ;` runs CMD (as do -execdir, -ok and -okdir)."""
    i = 0
    while i < len(args):
        if args[i][0] in _EXEC_FLAGS:
            end = next((j for j in range(i + 1, len(args)) if args[j][0] in (";", "+")), len(args))
            _run(args[i + 1:end], found, depth, [])
            i = end
        i += 1
