"""The programs shou.shellwords looks through to a command they run, and how their words say where that
command starts: the shells, the wrappers (`env`, `nice`, `sudo`, ...), the dynamic loader, `find -exec`, the
option readers of xargs, compgen and `sh -c`, and the handlers that only point at the command (`env`,
`jobs -x`, a program whose command cannot be known).

It stands alone because it is a catalogue, closed on purpose (reading any unknown program's words as a
possible command would deny `echo rm` and `man rm`), kept apart from the walk that consults it: it reads a
command's words, never a tree or a nested line, so it calls nothing of that walk and the imports go one way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .shellparse import Found, Word

__all__ = ["MAX_WRAPPED", "OTHER_SHELLS", "SHELLS", "Handler"]

SHELLS = frozenset({"sh", "bash", "rbash"})  # read as bash reads them
# Shells whose syntax is not bash's (or that bash's parser would misread): what they run is not known.
OTHER_SHELLS = frozenset({"dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "loksh", "ash", "yash", "posh",
                          "fish", "tcsh", "csh", "rc", "es", "elvish", "nu", "xonsh", "osh", "ysh"})
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
    "wine", "qemu-x86_64", "qemu-aarch64", "box64", "box86", "aa-exec", "sandbox-exec", "toybox", "xterm",
    # Environment and project runners: `poetry run rm x`, `direnv exec . rm x`, `aws-vault exec p -- rm x`.
    "direnv", "poetry", "pipenv", "pdm", "hatch", "uv", "conda", "mamba", "micromamba", "bundle", "pyenv", "rbenv",
    "asdf", "mise", "devbox", "aws-vault", "doppler", "dotenv", "cross-env", "env-cmd", "tsp", "nq",
})
# The dynamic loader runs a program given as its word: `/lib64/ld-linux-x86-64.so.2 /usr/bin/rm x`.
_LOADER = re.compile(r"ld(?:-linux[^/]*|-musl[^/]*|64)?\.so(?:\.[0-9]+)*")
_EXEC_FLAGS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# Programs that run a command from their words, besides _WRAPPERS and _HANDLERS' (for xargs: its input adds words).
_BUILTIN_RUNNERS = frozenset({"parallel", "sem", "ssh", "watch", "su", "script", "run-parts"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_COMPGEN_VALUES = "oAGWFCXPS"  # compgen's and complete's options that take a value

Handler = Callable[[str, list[Word], Found, int, list[Any]], list[int]]


def _suffixes(base: str, args: list[Word], found: Found) -> list[int]:
    """Where among a wrapper's words its command may start: at every word that is not an option or an
    assignment (an option's value could be the program's name, and the program could be any later word)."""
    if len(args) > MAX_WRAPPED:
        found.opaque.append(f"{base}: a wrapper given too many words to read")
        return []
    texts = [w if w is not None else r for w, r in args]
    return [i for i, t in enumerate(texts) if not t.startswith("-") and not _ASSIGNMENT.match(t)]


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


def _dash_c(args: list[Word]) -> int | None:
    """Where the first option cluster holding `c` is (`-c`, `-xc`), if any."""
    return next((i for i, (w, _) in enumerate(args) if w is not None and w.startswith("-")
                 and not w.startswith("--") and "c" in w[1:]), None)


def _opaque(why: str) -> Handler:
    def handle(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
        found.opaque.append(f"{base}: {why}")
        return []

    return handle


def _env(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    for word, raw in args:
        text = word if word is not None else raw
        split = text.startswith("--s") or (text.startswith("-") and not text.startswith("--") and "S" in text)
        if split or (word is None and raw.startswith("-")):  # -S, -iS'...', --split-string=, --sp ...
            found.opaque.append("env -S: a command line split at run time")
            return []
    return _suffixes(base, args, found)


def _jobs(base: str, args: list[Word], found: Found, depth: int, stdin: list[Any]) -> list[int]:
    """`jobs -x rm x` runs `rm x` (its job specs replaced by process ids)."""
    at = next((k for k, (w, r) in enumerate(args) if (w if w is not None else r).startswith("-") and "x" in (w or r)),
              None)
    return [] if at is None else [at + 1 + i for i in _suffixes(base, args[at + 1:], found)]
