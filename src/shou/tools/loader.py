"""Loading user tools from a Python file (`shou run --functions tools.py`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ..errors import UserError
from .base import Tool


def load_tools_from_file(path: str | Path) -> list[Tool]:
    """Import `path` and return the `Tool` objects it defines at module level (made with `@tool`)."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise UserError(f"functions file {str(path)!r} does not exist")
    name = f"shou_user_tools_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {str(path)!r} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except UserError:
        sys.modules.pop(name, None)
        raise
    except SystemExit as e:  # the file's own command-line code ran at import
        sys.modules.pop(name, None)
        raise UserError(f"importing {str(path)!r} called sys.exit({e.code!r}); a functions file must only define "
                        "tools (put script code under `if __name__ == \"__main__\":`)") from None
    except Exception as e:
        sys.modules.pop(name, None)
        raise UserError(f"importing {str(path)!r} failed: {type(e).__name__}: {e}") from e
    tools = [v for v in vars(module).values() if isinstance(v, Tool)]
    if not tools:
        raise UserError(f"{str(path)!r} defines no tools: decorate functions with @shou.tool")
    return tools
