"""Arithmetic on a value the line does not show runs a command the deny rules never see: bash evaluates a variable's
value as an expression, recursively, and a subscript in it runs its `$(...)` (a file named `a[$(rm x)]`, then
`for f in *; do echo $((f)); done`). Each form is checked against real bash first: it runs the substitution of a
file name, and shou calls the line opaque; arithmetic on literals and on values the line sets stays readable."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from shou.permissions import Policy
from shou.shellwords import programs

DENY = Policy(deny=["shell(rm *)", "shell(git push*)"])
BASH = shutil.which("bash")
NAME = "a[$(touch P)]"  # a file name an earlier call may have made


def _denied(line: str) -> bool:
    return DENY.decide("shell", {"command": line}).outcome == "deny"


def _bash_runs(line: str, tmp_path: Path) -> bool:
    """Whether bash, in a folder holding only a file named NAME, runs the `$(...)` of that name."""
    folder = tmp_path / f"d{time.monotonic_ns()}"
    folder.mkdir()
    (folder / NAME).write_text("")
    subprocess.run([BASH or "bash", "-c", line], cwd=folder, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    return (folder / "P").exists()


# `f` holds the file name (a value no line shows); each form evaluates it, and bash runs the `$(...)` in it.
EVALUATES = [
    "f=$(ls); echo $((f))", "f=$(ls); echo $(($f))", "for f in *; do echo $((f)); done", "f=$(ls); (( f ))",
    "f=$(ls); let f", "let a*", "f=$(ls); [[ $f -eq 1 ]]", "f=$(ls); [[ f -eq 1 ]]", "f=$(ls); [[ 1 -lt f ]]",
    "f=$(ls); declare -i n=$f", "f=$(ls); declare -i n; n=$f", "f=$(ls); declare -i n; n+=$f",
    "f=$(ls); g() { local -i n=$f; }; g", "f=$(ls); echo ${arr[$f]}", "f=$(ls); echo \"${arr[$f]}\"",
    "f=$(ls); echo ${arr[f]}", "f=$(ls); arr[f]=1", "f=$(ls); a=([f]=1)", "f=$(ls); : ${arr[$f]:-x}",
    "f=$(ls); s=abc; echo ${s:$f}", "f=$(ls); s=abc; echo ${s:f}", "f=$(ls); echo ${@:f}",
    "f=$(ls); a=(1); echo ${a[@]:f}",
    "f=$(ls); echo $[f]", "f=$(ls); echo ${!f}", "for f in *; do echo \"${!f}\"; done", "f=$(ls); test -v \"$f\"",
    "f=$(ls); [ -v \"$f\" ]", "f=$(ls); [[ -v $f ]]", "f=$(ls); read \"$f\" <<< 1", "f=$(ls); printf -v \"$f\" 1",
    "f=$(ls); declare \"$f=1\"", "echo $(( $(ls) ))", "(( $(ls) ))", "set -- *; (( $1 ))", "f=$(ls); x=f; (( x ))",
    "f=$(ls); for ((i=f; i<1; i++)); do :; done", "f=$(ls); case 1 in $((f))) ;; esac", "f=$(ls); cat <<E\n$((f))\nE",
    "f=$(ls); echo \"$((f))\"", "f=$(ls); declare -n r=$f; echo $r", "f=$(ls); declare -n r=f; (( r ))",
    "f=$(ls); n=$((1)); declare -i n; n=f", "f=$(ls); (( arr[f] ))", "read f < <(ls); ((f))",
    "f=$(ls); g() { ((f)); }; g", "f=$(ls); n=1; n=$f; ((n))", "f=$(ls); echo $(( ${f} ))",
    "ls | while read f; do ((f)); done", "declare -i n; read n < <(ls)", "declare -i n; for n in *; do :; done",
    "declare -i n; printf -v n %s \"$(ls)\"", "select f in *; do ((f)); break; done <<< 1",
]
# Bash does not evaluate these (the test builtin and printf read numbers; these builtins take a plain number).
NOT_EVALUATED = ["f=$(ls); test \"$f\" -gt 0", "f=$(ls); [ \"$f\" -gt 0 ]", "f=$(ls); printf %d \"$f\"",
                 "f=$(ls); shift $f", "f=$(ls); exit $f", "f=$(ls); echo ${f:0:1}", "f=$(ls); [[ $f == 1 ]]",
                 "f=$(ls); declare -A m; m[$f]=1", "f=$(ls); seq $f"]
# Opaque although this bash does not run them: the value is unknown and some bash (or a later use) evaluates it.
UNKNOWN_VALUES = [
    "((f))", "echo $((HOME))", "if c; then n=1; fi; ((n))", "(n=1); ((n))", "n=1 true; ((n))", "local n=1; ((n))",
    "f=1; eval f=\\$\\(ls\\); ((f))", "a=x; a+=y; ((a))", "((1/0, n=5)); ((n))", "bash -c '((f))'",
    "export n=$(cat f); bash -c 'if false; then n=1; fi; ((n))'", "f=$(ls); unset \"a[$f]\"",
    "n=1; declare -n r=n; r=$(ls); ((n))", "n=0; (( n += $(wc -l < f) ))", "x=${f:-1}; ((x))", ": ${n:=5}; ((n))",
    "echo ${a[$((f))]:1}", "[[ $x == $((f)) ]]", "for i in $(seq 3); do ((i)); done", "a=(1 $f); ((a[1]))",
]
# Arithmetic on literals, on always-numeric parameters and on values the line sets before: readable.
READABLE = [
    "i=0; ((i++))", "for ((i=0; i<3; i++)); do echo $i; done", "for ((i=0; i<3; i++)); do echo $((i*2)); done",
    "echo $((1 + 2))", "let 'a = 1 + 2'", "let i=0 i++", "n=3; echo $((n*2))", "i=0; while ((i < 3)); do ((i++)); done",
    "x=5; y=x; echo $((y))", "echo ${c[1]} ${@:2} ${a:-$(pwd)}", "echo ${#a[@]} $# $? $$ $((RANDOM % 6))",
    "declare -A m; m[foo]=1; echo ${m[foo]}", "n=$((3+4)); echo $((n))", "a=(1 2 3); echo ${a[1]} $((a[2]))",
    "[[ 1 -eq 1 ]]", "test \"$f\" -gt 0", "[ \"$x\" -lt 3 ]", "n=0; for f in *; do n=$((n+1)); done; echo $n",
    "declare -i n=5; n=n+1", "x=1; x+=2; ((x))", "echo $((0x1f + 16#ff))", "s=abcdef; echo ${s:2:3}",
    "for n in 1 2 3; do echo $((n*n)); done", "printf '%d\\n' \"$x\"", "x=$(date); echo \"$x\"", "read -r line < f",
    "i=0; for f in *; do ((i++)); done", "f() { local n=1; ((n)); }; f", "y=1; ((x = y + 1)); ((x))",
    "arr=(1 2); i=0; echo $(( ${arr[i]} + 1 ))", "x=HOME; echo ${!x}", "echo ${!BASH*} ${!arr[@]}",
    "declare -A m; m=([k]=v); echo ${m[k]}", "n=5; [[ $n -gt 3 ]]", "n=5; [[ n -gt 3 ]] && echo big",
    "a=(1 2 3); for ((i=0; i<${#a[@]}; i++)); do echo ${a[i]}; done", "x=1; : $((x++)); ((x))", "echo $(( $# + $? ))",
    "echo ${PATH:0:5}", "[[ -v HOME ]]", "test -v HOME", "x=3; echo ${s:x}",
]


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("line", EVALUATES)
def test_bash_runs_a_subscript_in_the_value_arithmetic_evaluates(line: str, tmp_path: Path) -> None:
    assert _bash_runs(line, tmp_path), line


@pytest.mark.parametrize("line", EVALUATES)
def test_arithmetic_on_a_value_the_line_does_not_show_is_opaque(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("line", NOT_EVALUATED)
def test_bash_does_not_evaluate_these(line: str, tmp_path: Path) -> None:
    assert not _bash_runs(line, tmp_path), line


@pytest.mark.parametrize("line", UNKNOWN_VALUES)
def test_arithmetic_on_a_value_only_the_running_shell_knows_is_opaque(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", READABLE)
def test_arithmetic_on_values_the_line_sets_stays_readable(line: str) -> None:
    found = programs(line)
    assert not found.opaque and not _denied(line), (line, found)


@pytest.mark.parametrize("line", ["(( a[$(rm -rf x)] ))", "echo $(( a[$(git push)] ))", "let \"a[$(rm -rf x)]\"",
                                  "for ((i=a[$(rm -rf x)]; i<1; i++)); do :; done", "[[ a[$(rm -rf x)] -eq 1 ]]"])
def test_a_substitution_in_a_static_subscript_is_a_command(line: str) -> None:
    found = programs(line)
    assert any(c.startswith(("rm -rf x", "git push")) for c in found.commands), found
    assert _denied(line)


# Where the value comes from, and how arithmetic reaches it: whenever bash runs the file name's `$(...)`, shou
# calls the line opaque; a static number is readable whatever the form.
SOURCES = ["f=$(ls)", "for f in *; do :; done", "read f < <(ls)", "f=$(ls); g=f; f=$g", "set -- *; f=$1", "f=3",
           "f=7; g=f", "n=$(ls); f=2",
           "f=(*)", "declare -a f=(*)", "f=(a *)"]  # review 49b: an array's elements are globbed too
SINKS = ["echo $((f))", "(( f ))", "let f", "[[ $f -eq 1 ]]", "[[ f -ge 1 ]]", "declare -i n=$f", "echo ${arr[$f]}",
         "echo ${arr[f]}", "s=abc; echo ${s:f}", "echo $[f+1]", "echo ${@:f}", "arr[f]=1", "[[ -v a[f] ]]",
         "echo $(( f + 1 ))", "x=f; echo $((x))", "echo ${!f}"]


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize(("source", "sink"), list(itertools.product(SOURCES, SINKS)))
def test_opaque_whenever_bash_runs_the_value(source: str, sink: str, tmp_path: Path) -> None:
    line = f"{source}; {sink}"
    if _bash_runs(line, tmp_path):
        assert _denied(line), (line, programs(line))
    if source in ("f=3", "f=7; g=f") and sink != "echo ${!f}":
        assert not programs(line).opaque, (line, programs(line))


def test_long_arithmetic_lines_are_decided_at_once() -> None:
    """Reading a node's text through the budgeted parse never ended once the budget was spent (a long `[[ ]]`)."""
    lines = ["[[ " + " && ".join(["$((a)) -eq 1"] * 3000) + " ]]", "((" + "a+" * 20000 + "1))",
             "a=1;((a));" * 3000, "".join(f"a{i}=a{i + 1}+a{i + 1};" for i in range(2000)) + "((a0))"]
    for line in lines:
        started = time.monotonic()
        assert programs(line).opaque, line[:40]
        assert time.monotonic() - started < 20, line[:40]


# Wrappers that run their words as a command or a shell line, missing from the table before.
WRAPPED = ["toybox rm x", "sg wheel 'rm x'", "sg wheel -c 'rm x'", "newgrp docker", "gdb -ex 'shell rm x'",
           "gdb -batch -ex '!rm x' ./a", "gdb -ex 'pipe p | rm x'", "gdb -ex \"$c\"", "tmux new-session 'rm x'",
           "nix-shell -p hello --run 'rm x'", "poetry run rm x", "uv run rm x", "pipenv run rm x", "direnv exec . rm x",
           "aws-vault exec p -- rm x", "xterm -e rm x", "conda run -n e rm x", "bundle exec rm x", "mise exec -- rm x",
           "flock /tmp/l rm x", "flock /tmp/l -c 'rm x'", "chroot /x rm y", "unshare -r rm x", "stdbuf -oL rm x",
           "ionice -c3 rm x", "taskset -c 1 rm x", "chrt -f 1 rm x", "setsid rm x", "nohup rm x", "time rm x",
           "watch 'rm x'", "script -c 'rm x'", "su -c 'rm x'", "runuser -u u -- rm x", "doas rm x",
           "systemd-run --user rm x", "busybox rm x", "dbus-launch rm x", "firejail rm x", "bwrap --bind / / rm x",
           "proot rm x", "fakeroot rm x", "faketime 2020-01-01 rm x", "ltrace rm x", "strace rm x", "valgrind rm x",
           "catchsegv rm x", "xvfb-run rm x", "with-lock-ex l rm x", "chpst -u u rm x", "parallel rm ::: x"]


@pytest.mark.parametrize("line", WRAPPED)
def test_wrappers_are_looked_through(line: str) -> None:
    assert _denied(line), (line, programs(line))


@pytest.mark.parametrize("line", ["gdb -ex 'break main' ./a", "gdb ./a.out", "tmux ls", "poetry install",
                                  "uv pip install requests", "nix-shell -p hello --run 'make test'", "sg wheel 'ls'"])
def test_wrapped_ordinary_lines_stay_allowed(line: str) -> None:
    assert not _denied(line), (line, programs(line))
