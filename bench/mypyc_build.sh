#!/usr/bin/env bash
# Issue 35 experiment: compile shou's hot modules (the peers' task profile) with mypyc, in place: the .so files
# land beside the .py files in src/ and win over them on import. Not a shipped build: an experiment, on a
# throwaway worktree with the source changes mypyc needs (bench/mypyc-experiment.patch, made on 265e197):
#   git worktree add --detach /tmp/mypyc HEAD && cd /tmp/mypyc && git apply bench/mypyc-experiment.patch
#   pip install mypy   # or MYPYC=/path/to/a/venv/bin/mypyc
#   bench/mypyc_build.sh             # the hot modules (HOT below)
#   bench/mypyc_build.sh shou/events.py shou/session.py   # just these (paths under src/)
#   bench/mypyc_build.sh --clean     # remove the .so files: pure Python again
# Then: PYTHONPATH=src python -c 'import shou.events as e; print(e.__file__)'   # ends in .so
#       PORT=18735 bash bench/instructions.sh .
# Measured (2026-12-06, mypy/mypyc 2.4.1, CPython 3.11.7, the 35 modules below): bench/instructions.sh
# 6.40-6.44 M instructions per task pure Python (this branch's source; main 6.43 M) -> 5.47-5.49 M compiled
# (-14.6%, 3.1x -> 2.7x floor-aio's 2.05 M). CPU and wall time per task: no difference this shared machine can
# resolve (pairs from 0.62x to 1.22x). Tests: 32 of 178 in the hot modules' files fail compiled, mostly because
# reading events back (shou.event_codec, typing.get_type_hints) sees mypyc's dataclass __annotations__, which
# lose generics and unions (python/mypy#11330); the rest monkeypatch or introspect compiled classes.
# Needs mypy (which brings mypyc), gcc and the Python headers; MYPYC names the mypyc to run (default: the
# one on PATH). Types are looked up in the interpreter that runs shou (`python`), so its packages resolve.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$REPO/src"
MYPYC="${MYPYC:-mypyc}"
PY="$(python -c 'import sys; print(sys.executable)')"

clean() {
  find "$SRC" -name '*.cpython-*.so' -delete
  rm -rf "$SRC/build" "$SRC/.mypy_cache"
}

if [ "${1:-}" = "--clean" ]; then clean; exit 0; fi

HOT=(
  shou/events.py shou/session.py shou/messages.py shou/chain.py shou/redact.py shou/permissions.py shou/usage.py
  shou/models/reply.py
  shou/agent/loop.py shou/agent/request.py shou/agent/toolpipe.py shou/agent/recorder.py shou/agent/turn.py
  shou/agent/approvals.py shou/agent/emitter.py shou/agent/tool_controls.py shou/agent/checkpointing.py
  shou/agent/guards.py
  shou/context/builder.py shou/context/tokens.py
  shou/store/sqlite.py shou/store/locks.py shou/store/together.py
  shou/tools/controls.py shou/tools/base.py shou/tools/threads.py
  shou/instructions/state.py
  shou/folds/approvals.py shou/folds/conversation.py shou/folds/forkpoint.py shou/folds/openrun.py
  shou/folds/questions.py shou/folds/requests.py shou/folds/scratch.py shou/folds/spending.py
)
# Left out: mypyc 2.4 has no async generators ("async generators are unimplemented"), and the model stream is
# made of them: models/openai_compat.py, agent/model_trace.py, models/controls.py, tools/pipeline.py
# (run_parallel), agent/budget.py, agent/agent.py. folds/vacant.py: a dict subclass with a multiple assignment
# in its class body (mypyc: unsupported); agent/agent.py also has property() and descriptor class attributes.
# agent/modelcall.py: RunCall has __slots__ and an interpreted base (models/pipeline.ModelCall), which mypyc
# refuses at import ("mypyc classes can't have __slots__").
if [ $# -gt 0 ]; then MODS=("$@"); else MODS=("${HOT[@]}"); fi

clean  # one build at a time: a module left from an earlier build would call into a shared library now gone
cfg="$(mktemp)"
trap 'rm -f "$cfg"' EXIT
# follow_imports=silent: the modules imported but not compiled are read for their types, their errors not
# reported (mypy finds ~199 across src/shou, most far from the hot path); the compiled ones must be clean.
cat >"$cfg" <<EOF
[mypy]
follow_imports = silent
ignore_missing_imports = True
python_executable = $PY
EOF
cd "$SRC"
"$MYPYC" --config-file "$cfg" "${MODS[@]}"
rm -rf "$SRC/build" "$SRC/.mypy_cache"
echo "compiled ${#MODS[@]} modules: $(find "$SRC" -name '*.cpython-*.so' | wc -l) .so files in $SRC"
