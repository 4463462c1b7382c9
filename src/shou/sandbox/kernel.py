"""The persistent Python interpreter that runs *inside* the sandbox for `run_code(..., stateful=True)`.

This file is copied into the sandbox and run with the sandbox's own python3, so it uses the standard
library only. Protocol: one JSON object per line. The host sends `{"code": "...", "tools": [...]}` on the
kernel's stdin; the kernel answers `{"stdout": ..., "stderr": ..., "error": ...}` on a private copy of its
stdout. `tools` (code mode) become Python functions for the cell: calling one writes `{"call": {"name",
"arguments"}}` and waits for the host's `{"value": ...}` or `{"error": "..."}` line (raised as `ToolError`),
so the host runs every tool, with its own checks; the code itself never leaves the sandbox. During a cell,
file descriptors 1 and 2 point at files, so output from child processes is captured too and a flood
cannot corrupt the protocol; only the head and tail of each are sent back.
"""

import ast
import contextlib
import io
import json
import os
import sys
import tempfile
import traceback

KEEP = int(os.environ.get("SHOU_KERNEL_KEEP", "32000"))


def _read_capped(path: str) -> str:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size <= 2 * KEEP:
            data = f.read()
            return data.decode("utf-8", "replace")
        head = f.read(KEEP)
        f.seek(size - KEEP)
        tail = f.read()
    note = f"\n[... {size - 2 * KEEP} bytes omitted ...]\n".encode()
    return (head + note + tail).decode("utf-8", "replace")


class ToolError(Exception):
    """A tool called from the code failed, or the call was refused (its message says why)."""


def _tool_function(name: str, params: list, doc: str, commands, replies):
    """A function that asks the host to run tool `name` with the given arguments and returns its value."""

    def call(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError(f"{name}() takes {len(params)} positional arguments but {len(args)} were given")
        arguments = dict(zip(params, args, strict=False))
        for key, value in kwargs.items():
            if key in arguments:
                raise TypeError(f"{name}() got multiple values for argument {key!r}")
            arguments[key] = value
        try:
            line = json.dumps({"call": {"name": name, "arguments": arguments}})
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name}(): the arguments must be JSON values (str, int, float, bool, None, "
                            f"list, dict): {e}") from None
        replies.write(line + "\n")
        replies.flush()
        answer = json.loads(commands.readline() or "{}")
        if "value" not in answer:
            raise ToolError(answer.get("error") or f"{name}: no answer from the host")
        return answer["value"]

    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    return call


def _run_cell(code: str, namespace: dict) -> str | None:
    """Run `code`; show the value of a final expression, as a notebook does. Returns the error text."""
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), namespace)
            if value is not None:
                print(repr(value))
    except SystemExit as e:
        return f"SystemExit: {e.code}"
    except BaseException:
        etype, evalue, tb = sys.exc_info()
        # Drop this kernel's own frames; the model only needs its cell's.
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        return "".join(traceback.format_exception(etype, evalue, tb))
    return None


def main() -> None:
    commands = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = io.StringIO("")
    namespace: dict = {"__name__": "__main__"}
    scratch = tempfile.mkdtemp(prefix="shou-cell-")  # private: the local backend shares the host's /tmp
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in commands:
        request = json.loads(line)
        out_path, err_path = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
        out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8", line_buffering=True)
        for spec in request.get("tools") or ():
            namespace[spec["name"]] = _tool_function(spec["name"], spec["params"], spec.get("doc", ""), commands,
                                                     replies)
        if request.get("tools"):
            namespace["ToolError"] = ToolError
        error = _run_cell(request["code"], namespace)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a full /tmp must not kill the kernel
                stream.flush()
        reply = {"stdout": _read_capped(out_path), "stderr": _read_capped(err_path), "error": error}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
