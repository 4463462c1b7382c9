"""Deny rules for `shell` read each command's words as bash does (issue: attack B). Each class below let a line
run a denied program: words after a redirect, brace expansion inside a word, builtins that run a string,
expansions that evaluate a subscript, here-document bodies, xargs feeding a shell, BASH_ENV through export,
wrappers missing from the table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shou.permissions import Policy
from shou.shellwords import programs

from .conftest import tool_messages

DENY = Policy(deny=["shell(rm *)", "shell(rm)", "shell(git push*)", "shell(rm -rf*)"])


def _denied(line: str) -> bool:
    return DENY.decide("shell", {"command": line}).outcome == "deny"


# bash reads every word after a redirect's target as the command's next word; tree-sitter-bash hung them on
# the redirect, where the reader did not look.
REDIRECTED = [
    "git 2>&1 push origin HEAD:main", "rm 2>&1 -rf d2", "command 2>/dev/null rm -f x", "env >/dev/null rm x",
    "exec 3>/dev/null rm x", "eval 2>/dev/null 'rm x'", "nice 2>/dev/null rm x", "sudo >f rm x",
    "timeout 5 >f rm x", "xargs 2>f rm < l", "exec &>f rm x", "exec {fd}>f rm x", "x=1 {fd}>f rm x",
    "git >| f push", "git 3<&0 push", "git 2<&- push", "git >&- push", "git 2>&1- push", "git &>> f push",
    "git >& /dev/null push", "command -- 2>&1 rm x", "command <<EOF rm x\nbody\nEOF", "git <<EOF push\nb\nEOF",
    "git 0</dev/null push", "a && git &>> f push; b", "a | git >f push", "cat <<EOF >out; rm <<E2 x\nb\nEOF\nE2\n",
    "ls; git 2>/dev/null >/dev/null push", "(git >f push)", "if true; then git >f push; fi", "git >f push &",
    "! git >f push", "a || ! git 2>&1 push",
]


@pytest.mark.parametrize("line", REDIRECTED)
def test_words_after_a_redirect_are_the_commands_words(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize(("line", "command"), [
    ("git 0</dev/null push", "git push"), ("git >f a 2>g b c", "git a b c"), ("make 2>&1 test", "make test"),
    ("x=1 {fd}>f ls -l", "ls -l"), ("ls -la 2>/dev/null", "ls -la"), ("git 2<&- status", "git status"),
    ("! ls >f -la", "ls -la"),
])
def test_a_redirect_and_its_descriptor_are_not_words(line: str, command: str) -> None:
    assert programs(line).commands == [command]


_REDIRECT = st.sampled_from(["2>&1", ">/dev/null", "2>/dev/null", "&>f", ">>f", "<f", "0<f", "3<&0", "2<&-",
                             ">|f", "{fd}>f", "&>>f", ">& f", "2>&1-"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_REDIRECT, max_size=2), min_size=4, max_size=4))
def test_redirects_anywhere_among_the_words_leave_the_command_as_bash_runs_it(spots: list[list[str]]) -> None:
    words = ["git", "push", "origin", "main"]
    line = " ".join(" ".join([*spot, w]) for spot, w in zip(spots, words, strict=True))
    found = programs(line)  # a line the parser cannot read (`{fd}>f` first) is opaque, which denies it too
    assert found.opaque or found.commands == ["git push origin main"], line
    assert _denied(line), line


# Bash expands braces inside a word before it runs it: `r{m,} x` runs `rm r x`.
BRACED = ["r{m,} -f x", "rm{,} x", "git pu{s,}h", "{rm,-r,x}", "{,rm} x", "git pu{s..s}h", "{r,}m{,} x",
          "r{m,}\"\" x", "git p{u{s,},}h", "r{m..m} x", "git pus{h,}$x", "x{}a,b} rm", "r{m,}{,} x"]


@pytest.mark.parametrize("line", BRACED)
def test_a_brace_expansion_inside_a_word_is_read_as_bash_expands_it(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize(("line", "command"), [
    ("cp a{,.bak}", "cp a a.bak"), ("mkdir -p s/{a,b}/{c,d}", "mkdir -p s/a/c s/a/d s/b/c s/b/d"),
    ("echo \"{rm,x}\" \\{rm,x} '{a,b}'", "echo {rm,x} {rm,x} {a,b}"), ("echo {a..c}{1..2}", "echo a1 a2 b1 b2 c1 c2"),
    ("find . -exec echo {} \\;", "find . -exec echo {} ;"), ("echo {a{b,c}}", "echo {ab} {ac}"),
])
def test_brace_expansion_gives_bash_s_words(line: str, command: str) -> None:
    assert programs(line).commands[0] == command


_BRACE_PIECES = st.sampled_from(["{", "}", ",", "a", "b", ".", "1", "..", "\\{", '"{"', "'}'", "{a,b}", '""'])


@settings(max_examples=200, deadline=None)
@given(st.lists(_BRACE_PIECES, min_size=1, max_size=8).map("".join))
def test_brace_expansion_agrees_with_bash(word: str) -> None:
    """Whatever word shou reads without calling it opaque, bash expands to the same words."""
    run = subprocess.run(["bash", "-c", "printf '<%s>' x " + word], capture_output=True, text=True, timeout=10)
    if run.returncode:
        return
    found = programs("printf x " + word)
    if found.opaque:
        return
    assert found.commands[0] == " ".join(["printf", *run.stdout[1:-1].split("><")]), word


# Builtins that run a string: compgen's (and complete's) -C command and -F function; fc re-runs the history.
RUNNING_BUILTINS = ["compgen -C 'rm x' a", "compgen -C'rm x' a", "compgen -aC 'rm x' a", "compgen -W x -C 'rm x'",
                    "compgen -F f a", "history -s rm x; fc -s", "fc -e vi", "builtin compgen -C 'rm x' a",
                    "compgen $o 'rm x'", "complete -C 'rm x' a", "compgen -W \"$w\" -C 'rm x' a", "jobs -x rm x",
                    "jobs -lx rm x"]


@pytest.mark.parametrize("line", RUNNING_BUILTINS)
def test_builtins_that_run_a_string_are_read(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["compgen -c ls", "compgen -W 'a b' -- a", "compgen -W '-C x' a", "history"])
def test_plain_completion_is_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))


# Expansions that evaluate a value as arithmetic (whose subscript may hold `$(...)`) or as a prompt.
EVALUATING = ["a='$(rm x)'; echo ${a@P}", "a=$(<f); echo ${a@P}", "echo \"${a@P}\"", "echo ${a[@]@P}",
              "a='b[$(rm x)]'; echo ${!a}", "a='b[$(rm x)]'; echo ${c[a]}", "a='b[$(rm x)]'; c=([a]=1)",
              "a='b[$(rm x)]'; echo ${@:a}", "a='b[$(rm x)]'; echo \"${!a}\"", "a='b[$(rm x)]'; c[a]=1",
              "a='b[$(rm x)]'; echo ${x:a:1}", "a='b[`rm x`]'; echo ${!a}", "a=\"b[\\$(rm x)]\"; echo ${c[a]}"]


@pytest.mark.parametrize("line", EVALUATING)
def test_expansions_that_evaluate_a_value_are_opaque(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["x=HOME; echo ${c[1]} ${@:2} ${!x} ${a:-$(pwd)}", "echo '$(x)' ${a:-1}",
                                  "echo ${#a[@]}"])
def test_plain_expansions_are_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))


# Bash runs the substitutions of an unquoted here-document's body, backticks and `<<-` bodies too.
HEREDOCS = ["cat <<EOF\n`rm x`\nEOF", "cat <<-EOF\n\t$(rm x)\n\tEOF", "cat <<-EOF\n\t`rm x`\n\tEOF",
            "cat <<E\na `rm x` b\nE", "cat <<-EOF\n\t${x:-$(rm x)}\n\tEOF", "cat <<EOF\n$\\\n(rm x)\nEOF",
            "cat <<E >f\n\\\\`rm x`\nE", "x=$(cat <<EOF\n`rm x`\nEOF\n)"]


@pytest.mark.parametrize("line", HEREDOCS)
def test_here_document_substitutions_are_read(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["cat <<EOF\n$(date) ${HOME} $x \\`x\\` \\$(y)\nEOF", "cat <<'EOF'\n`rm x`\nEOF",
                                  "cat <<-EOF\n\tplain $x\n\tEOF", "cat <<-'E'\n\t$(rm x)\n\tE"])
def test_plain_here_documents_are_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))


# A program xargs starts that reads its words as a command (a shell, a wrapper) or whose name -I replaces runs
# what xargs's input says.
XARGS = ["echo 'rm x' | xargs -I{} sh -c '{}'", "echo \"'rm x'\" | xargs sh -c", "echo rm x | xargs env",
         "echo rm | xargs -I{} {} x", "echo rm | xargs -I {} {} x", "echo rm | xargs -IXX XX x",
         "echo 'rm x' | xargs -n 1 bash", "echo rm x | xargs -P2 -n1 nice", "echo rm | xargs $o {} x",
         "echo rm x | xargs /usr/bin/env", "echo 'rm x' | xargs -0 -I % bash -c %", "echo rm x | xargs --replace sudo",
         "echo 'rm x' | xargs parallel"]


@pytest.mark.parametrize("line", XARGS)
def test_a_command_made_of_xargs_input_is_opaque(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["ls | xargs -I{} cp {} /tmp", "ls | xargs -I {} cp {} /tmp", "ls | xargs wc -l",
                                  "ls | xargs -0 grep foo", "echo a | xargs"])
def test_ordinary_xargs_is_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))


# A start-up variable (BASH_ENV, ENV, PS4, ...) set through a declaration builtin, its words read as bash reads them.
STARTUP = ["echo 'rm x' > f; export 'BASH_ENV=f'; bash -c :", "export \"BASH_ENV\"=f; bash -c :",
           "export BASH_E\\NV=f; bash -c :", "v=BASH_ENV; export $v=f; bash -c :", "export \"$v\"; bash -c :",
           "declare -n r=BASH_ENV; r=f; bash -c :", "readonly 'ENV=x'", "export $'BASH_ENV'=f",
           "for BASH_ENV in f; do export BASH_ENV; bash -c :; done", "for PS4 in '$(rm x)'; do set -x; :; done",
           "declare -x 'PS4=$(rm x)'", "local \"BASH_FUNC_ls%%=() { rm x; }\"", "v=PS4; read $v < f; set -x; :",
           "builtin read \"$v\" < f", "printf -v \"$v\" %s x", "echo ${PS4:=x}; set -x", ": ${BASH_ENV=f}; bash -c :"]


@pytest.mark.parametrize("line", STARTUP)
def test_startup_variables_set_by_declarations_are_seen(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["export PATH=$PATH:x FOO=\"$(pwd)\"", "export FOO", "local a=1 b", "declare -A m",
                                  "export 'a[1]=2'", "for i in 1 2; do :; done", "read -r line < f",
                                  "while read -r a b; do echo $a; done < f", "printf '%s' \"$x\"", "echo ${x:=y}"])
def test_ordinary_declarations_are_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))


# Wrappers that were missing from the table, with their option shapes.
WRAPPED = ["linux64 rm x", "linux32 rm x", "setarch x86_64 rm x", "setarch x86_64 -R rm x", "i386 rm x", "x86_64 rm x",
           "uname26 rm x", "choom -n 0 -- rm x", "runcon -t t rm x", "start-stop-daemon -S -x /bin/rm -- x",
           "start-stop-daemon -S --exec=/bin/rm -- x", "start-stop-daemon -S -a /bin/rm", "start-stop-daemon -x/bin/rm",
           "/lib64/ld-linux-x86-64.so.2 /usr/bin/rm x", "ld.so /bin/rm x", "/lib/ld-linux-aarch64.so.1 /bin/rm x",
           "/lib/ld-musl-x86_64.so.1 /bin/rm x", "/lib64/ld-linux-x86-64.so.2 --argv0 a /bin/rm x", "fakechroot rm x",
           "capsh -- -c 'rm x'", "capsh --caps= -- -c 'rm x'", "capsh --shell=/bin/rm -- x", "parallel 'rm {}' ::: x",
           "parallel ::: 'rm x'", "echo 'rm x' | parallel", "hyperfine 'rm x'", "bwrap --bind / / rm x", "gosu u rm x",
           "tini -- rm x", "perf stat rm x", "gdb --args rm x", "entr rm x"]


@pytest.mark.parametrize("line", WRAPPED)
def test_more_wrappers_are_looked_through(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["parallel gzip ::: a b", "ip addr", "perf stat make", "setarch x86_64 -R make",
                                  "echo rm", "man rm", "ldd /bin/ls"])
def test_wrapped_ordinary_lines_are_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))


def test_denied_spellings_do_not_delete_through_the_cli(serve, shou, workspace: Path, tmp_path: Path) -> None:
    """One spelling of each class, run by `shou run` with a scripted model in the bubblewrap sandbox: every one is
    denied and the file survives, while a plain line does run there (so a kept file is no broken sandbox)."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "shou.toml").write_text(
        'sandbox = "bubblewrap"\n[permissions]\ndeny = ["shell(rm *)", "shell(rm)"]\n')
    (workspace / "victim.txt").write_text("keep me")
    (workspace / "f").write_text("rm -f victim.txt\n")
    lines = ["command 2>/dev/null rm -f victim.txt", "r{m,} -f victim.txt", "compgen -C 'rm -f victim.txt' a",
             "a='$(rm -f victim.txt)'; echo ${a@P}", "cat <<EOF\n`rm -f victim.txt`\nEOF",
             "echo 'rm -f victim.txt' | xargs -I{} sh -c '{}'", "export 'BASH_ENV=f'; bash -c :",
             "linux64 rm -f victim.txt", "echo ran > ran.txt"]
    turns: list[dict] = [{"tool_calls": [{"name": "shell", "arguments": {"command": line}, "id": f"c{n}"}
                                         for n, line in enumerate(lines)]}, {"text": "done"}]
    srv = serve(turns)
    r = shou("run", "clean up", "--yes", server=srv, timeout=120)
    assert r.returncode == 0, r.stderr
    results = tool_messages(srv.requests[1])
    assert len(results) == len(lines)
    for line, result in zip(lines[:-1], results, strict=False):
        assert "denied by policy" in result["content"], (line, result["content"])
    assert (workspace / "victim.txt").read_text() == "keep me"
    assert (workspace / "ran.txt").read_text() == "ran\n"  # the allowed line did run in the sandbox


@pytest.mark.parametrize("line", ["echo " + "{" * 30000, "echo " + "{a," * 15000, "echo " + "{,}" * 20000,
                                  "echo " + "x{" * 20000 + "}" * 20000, "echo " + "{a..b}" * 10000])
def test_brace_heavy_lines_are_decided_at_once_and_opaque(line: str) -> None:
    import time

    started = time.monotonic()
    assert _denied(line)
    assert time.monotonic() - started < 5, "a brace expansion that rescans its word must stay bounded"


@pytest.mark.parametrize("line", ["r\\{x,}? x", "/bin/r{m,}? x"])
def test_a_glob_in_a_split_program_name_is_opaque(line: str) -> None:
    assert programs(line).opaque, line


# A command known only up to a word the running line makes meets every rule some such command would meet.
UNKNOWN_WORDS = ["a=push; git $a origin", "git \"$(echo push)\"", "echo push | xargs git",
                 "echo push | xargs -I{} git {} origin", "git pu?h", "git pu[s]h origin", "echo push | xargs -n1 git",
                 "git `echo push`", "b=sh; git pu$b"]


@pytest.mark.parametrize("line", UNKNOWN_WORDS)
def test_a_word_only_the_running_line_knows_meets_the_rules_it_could(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["git log $b", "ls | xargs git log", "cd $d && git status", "echo $HOME",
                                  "git add *.py", "ls *.py", "git 'pu?h'", "git log -- *.py"])
def test_unknown_words_after_what_a_rule_names_are_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))


@given(st.text(alphabet="gitpush *?[]!-", max_size=12), st.text(alphabet="gitpush -", max_size=12),
       st.text(alphabet="gitpush -", max_size=6))
def test_glob_could_start_agrees_with_glob_match(pattern: str, start: str, rest: str) -> None:
    from shou.glob import glob_could_start, glob_match

    if glob_match(start + rest, pattern):
        assert glob_could_start(start, pattern), (start, rest, pattern)
