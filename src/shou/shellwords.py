"""Every program a shell line runs, as deny and ask rules should see it, read with a real bash parser.

tree-sitter-bash parses the line; every command in the tree counts (pipelines, lists, subshells, `if`
and `case` bodies, functions, command and process substitutions), each with its words as bash reads them
(`\\rm`, `r''m`, `"rm"`, `$'\\x72m'` are `rm`; `/bin/rm` is `rm`; words after a redirect are the command's,
`git 2>&1 push` is `git push`; braces are expanded, `r{m,} x` is `rm r x`). Wrappers are looked through to the
program they run (`env`, `exec`, `command`, `nice`, `timeout`, `sudo`, `xargs`, `find -exec`, ...), and
so are shells given their script statically (`bash -c '...'`, `bash <<< '...'`, a here-document, `eval`,
`trap`). Where the program cannot be known before the line runs (a name made by an expansion such as `$a`
or `${x:-rm}`, a substitution as the name, a glob in the name, a shell reading a script file or a pipe,
`source`, a line the parser cannot read), the line is *opaque*: shou.permissions then treats it as
matching every deny rule for `shell` (or, without one, every ask rule). A deny list is still no sandbox:
`python -c`, `perl -e` or a program the agent wrote can delete too (README, SECURITY.md).
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .bashwords import GLOB, BraceUnreadable, brace_words, globbed, node_text, redirect_text, static_word, stdin_of
from .shellrisk import Risk

__all__ = ["Found", "programs"]

SHELLS = frozenset({"sh", "bash", "rbash"})  # read as bash reads them
# Shells whose syntax is not bash's (or that bash's parser would misread): what they run is not known.
OTHER_SHELLS = frozenset({"dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "loksh", "ash", "yash", "posh",
                          "fish", "tcsh", "csh", "rc", "es", "elvish", "nu", "xonsh", "osh", "ysh"})
MAX_DEPTH = 4  # shells inside shells; deeper is opaque
MAX_LINE = 64 * 1024  # characters; a longer line is opaque
# Work a line may take, in nodes visited and characters of commands recorded: linear in its size, so the
# worst line is decided in a fraction of a second (wrappers make every suffix of their words a command).
WORK_PER_CHAR, WORK_BASE = 24, 200_000
PARSE_READS_PER_BYTE = 32
MAX_WRAPPED = 256  # words after a wrapper; more is opaque (each suffix is a possible command)
# Programs that run the rest of their words as a command. Their options are not parsed (a table of them
# misses some: `exec -la z rm`, `setpriv --ruid 0 rm`): every suffix of their words may be the command.
_WRAPPERS = frozenset({
    "env", "exec", "command", "builtin", "nohup", "setsid", "unbuffer", "time", "nice", "ionice", "timeout",
    "stdbuf", "sudo", "doas", "chroot", "flock", "xargs", "busybox", "coproc", "unshare", "nsenter", "setpriv",
    "chrt", "taskset", "strace", "ltrace", "prlimit", "firejail", "runuser", "catchsegv", "faketime",
    "proxychains", "proxychains4", "torsocks", "then", "do", "else", "pkexec", "sg", "numactl", "cgexec",
    "systemd-run", "nocache", "eatmydata", "fakeroot", "chpst", "softlimit", "valgrind", "ssh-agent",
    "dbus-launch", "xvfb-run", "trickle", "schedtool", "cpulimit", "sem", "parallel", "rlwrap", "!", "{",
    # setarch and the personality names it is installed as (`linux64 rm x`, `setarch x86_64 rm x`)
    "setarch", "linux32", "linux64", "uname26", "i386", "i486", "i586", "i686", "x86_64", "ia64", "ppc", "ppc32",
    "ppc64", "ppc64le", "s390", "s390x", "sparc", "sparc32", "sparc32bash", "sparc64", "mips", "mips32", "mips64",
    "parisc", "parisc32", "parisc64", "aarch64", "arm", "armv7l", "arm64", "loongarch64", "riscv64",
    # Others that run their words as a command (their options' values are harmless candidates).
    "choom", "runcon", "start-stop-daemon", "fakechroot", "ld.so", "tini", "dumb-init", "catatonit", "su-exec",
    "gosu", "setuidgid", "envuidgid", "envdir", "setlock", "pgrphack", "fghack", "lckdo", "with-lock-ex", "run-one",
    "timelimit", "daemonize", "daemon", "nsjail", "bwrap", "proot", "schroot", "systemd-nspawn", "minijail0",
    "sshpass", "mpirun", "mpiexec", "srun", "entr", "watchexec", "ccache", "distcc", "icecc", "perf", "gdb",
    "heaptrack", "rr", "screen", "dtach", "abduco", "chronic", "ifne", "retry", "krun", "ip", "netns",
    "capsh", "vipe", "caffeinate", "systemd-inhibit", "flatpak-spawn", "toolbox", "distrobox",
    "wine", "qemu-x86_64", "qemu-aarch64", "box64", "box86", "aa-exec", "sandbox-exec", "newgrp",
})
# The dynamic loader runs a program given as its word: `/lib64/ld-linux-x86-64.so.2 /usr/bin/rm x`.
_LOADER = re.compile(r"ld(?:-linux[^/]*|-musl[^/]*|64)?\.so(?:\.[0-9]+)*")
_EXEC_FLAGS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

Word = tuple[str | None, str]  # (the word as bash reads it, or None when only the running line knows; the text)


@dataclass
class Found:
    """The commands of a line (each `program arg...`, the program by its name) and, when some program
    cannot be known statically, why (`opaque`)."""

    commands: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    # Commands known only up to a word the running line makes (`git $a x`, `xargs git`'s input): each as its
    # known start, `git `; a rule that some command with that start could match matches it.
    partial: list[str] = field(default_factory=list)
    budget: int = 0  # work left (nodes visited, characters of commands recorded); see _spend


class _Exhausted(Exception):
    """The line needs more work to read than any honest line does (a deliberate parser DoS)."""


def _spend(found: Found, cost: int) -> None:
    found.budget -= cost
    if found.budget < 0:
        raise _Exhausted


def _record(found: Found, command: str) -> None:
    _spend(found, len(command) + 1)
    found.commands.append(command)


@functools.cache
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


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


def _parse(source: bytes) -> Any:
    """The parsed tree of `source`, or `_Exhausted` past a work bound linear in its size: tree-sitter's error
    recovery is quadratic on some input (`x[a][a]...` took seconds). The parser re-reads the text as it
    works, so it is fed a byte at a time and the reads counted (an honest line takes under ten per byte);
    past the bound it is told the text ended."""
    reads, limit = 0, PARSE_READS_PER_BYTE * len(source) + 10_000

    def read(offset: int, _point: Any) -> bytes:
        nonlocal reads
        reads += 1
        return b"" if reads > limit else source[offset:offset + 1]

    tree = _parser().parse(read)
    if reads > limit:
        raise _Exhausted
    return tree.root_node


_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_FD_WORD = re.compile(r"[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\}")  # `2>f`, `{fd}>f`: the redirect's descriptor


def _redirect_words(redirect: Any) -> list[Any]:
    """The words tree-sitter-bash hangs on a redirect that are not its own target: bash reads every word after a
    redirect's target as the command's next argument (`git 2>&1 push` runs `git push`; `cmd <<E rm x` runs
    `cmd rm x`), but the grammar makes them extra `destination`s of the redirect or `argument`s of a here-document."""
    words: list[Any] = []
    # `2<&-` and `>&-` close a descriptor and have no target: every word after them is the command's
    closes = any(c.type in ("<&-", ">&-") for c in redirect.children)
    targets = 1 if closes else 0
    for i, child in enumerate(redirect.children):
        fieldname = redirect.field_name_for_child(i)
        if child.type in _REDIRECTS:
            words += _redirect_words(child)
        elif fieldname == "destination":
            targets += 1
            if targets > 1 or redirect.type != "file_redirect":
                words.append(child)
        elif fieldname == "argument":
            words.append(child)
    return words


def _redirects(node: Any) -> list[Any]:
    """Every redirect among `node`'s children, and those nested in them (a here-document's `>out`)."""
    out = []
    for child in node.children:
        if child.type in _REDIRECTS:
            out += [child, *_redirects(child)]
    return out


def _place_redirected_words(statement: Any, extra: dict[int, list[Any]], found: Found) -> None:
    """Give the words a redirect of `statement` holds (see _redirect_words) to the command they belong to: the
    statement's body, or the last command of a list or pipeline the grammar put under the redirect
    (`a && git >f push` redirects and runs `git push`). Where no such command is found, the line is opaque."""
    words = [w for r in statement.children_by_field_name("redirect") for w in _redirect_words(r)]
    if not words:
        return
    target = statement.child_by_field_name("body")
    if target is None:  # `2>&1 git push`: only redirects, the command all in their words
        extra[statement.id] = words
        return
    while target is not None and target.type in ("list", "pipeline", "negated_command") and target.named_child_count:
        target = target.named_children[-1]
    if target is None or target.type != "command":
        found.opaque.append(f"{node_text(words[0])}: words after a redirect shou cannot place")
        return
    extra.setdefault(target.id, []).extend(words)


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
    risk.command(argv)
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


Handler = Callable[[str, list[Word], Found, int, list[Any]], list[int]]
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|\\.", re.S)


def _unquoted_glob(raw: str) -> bool:
    """Whether a word's text holds a glob outside quotes (`pu?h` is whatever file names match: `push`)."""
    return bool(GLOB.search(_QUOTED.sub("", raw)))


def _partial(found: Found, known: list[str]) -> None:
    """Record a command whose words after `known` only the running line knows (see Found.partial)."""
    start = " ".join(known) + " "
    _spend(found, len(start))
    found.partial.append(start)


def _suffixes(base: str, args: list[Word], found: Found) -> list[int]:
    """Where among a wrapper's words its command may start: at every word that is not an option or an
    assignment (an option's value could be the program's name, and the program could be any later word)."""
    if len(args) > MAX_WRAPPED:
        found.opaque.append(f"{base}: a wrapper given too many words to read")
        return []
    texts = [w if w is not None else r for w, r in args]
    return [i for i, t in enumerate(texts) if not t.startswith("-") and not _ASSIGNMENT.match(t)]


def _opaque(why: str) -> Handler:
    def handle(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
        found.opaque.append(f"{base}: {why}")
        return []

    return handle


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
    _scripts(base, args, found, depth, "c")  # su USER -c, su -c'...', --command=, script -c, flock FILE -c
    return _suffixes(base, args, found) if base in _WRAPPERS else []


def _xargs_replaced(args: list[Word]) -> list[str]:
    """The strings `xargs -I R` (`-IR`, `-i`, `--replace[=R]`) replaces with a line of its input."""
    out = []
    for k, (word, _) in enumerate(args):
        if word is None:
            continue
        if word.startswith("-I"):
            value = word[2:] or (args[k + 1][0] if k + 1 < len(args) else None)
            out.append(value or "")
        elif word.startswith("-i") or word == "--replace":
            out.append(word[2:] or "{}")
        elif word.startswith("--replace="):
            out.append(word.split("=", 1)[1])
    return out


_XARGS_VALUES = "adEILnPs"  # xargs's short options that take a value (GNU, BSD)


def _xargs_program(args: list[Word]) -> int | None:
    """Where xargs's program is, past its options, or None when a word only the running shell knows comes first
    (then every suffix is looked at)."""
    k = 0
    while k < len(args):
        word = args[k][0]
        if word is None:
            return None
        if word == "--":
            return k + 1 if k + 1 < len(args) else None
        if not word.startswith("-") or word == "-":
            return k
        if not word.startswith("--"):
            letter = next((j for j, c in enumerate(word[1:], 1) if c in _XARGS_VALUES), None)
            if letter is not None and not word[letter + 1:]:
                k += 1  # `-n 1`, `-I {}`: the next word is the value
        k += 1
    return None


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


def _env(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    for word, raw in args:
        text = word if word is not None else raw
        split = text.startswith("--s") or (text.startswith("-") and not text.startswith("--") and "S" in text)
        if split or (word is None and raw.startswith("-")):  # -S, -iS'...', --split-string=, --sp ...
            found.opaque.append("env -S: a command line split at run time")
            return []
    return _suffixes(base, args, found)


_COMPGEN_VALUES = "oAGWFCXPS"  # compgen's and complete's options that take a value


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


def _jobs(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """`jobs -x rm x` runs `rm x` (its job specs replaced by process ids)."""
    at = next((k for k, (w, r) in enumerate(args) if (w if w is not None else r).startswith("-") and "x" in (w or r)),
              None)
    return [] if at is None else [at + 1 + i for i in _suffixes(base, args[at + 1:], found)]


def _find_handler(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    _find(args, found, depth)
    return []


# Programs that run a command from their words, besides _WRAPPERS and _HANDLERS' (for xargs: its input adds words).
_BUILTIN_RUNNERS = frozenset({"parallel", "sem", "ssh", "watch", "su", "script", "run-parts"})

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
    **{name: _with_c for name in ("su", "script", "flock", "runuser")},
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


def _dash_c(args: list[Word]) -> int | None:
    """Where the first option cluster holding `c` is (`-c`, `-xc`), if any."""
    return next((i for i, (w, _) in enumerate(args) if w is not None and w.startswith("-")
                 and not w.startswith("--") and "c" in w[1:]), None)


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
