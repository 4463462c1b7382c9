"""How each language runs: the program file and the command, with heap limits that fit the memory limit."""

from __future__ import annotations

from ..errors import ToolError
from .base import LANGUAGES, Limits

# Runtimes reserve memory beyond their heap (code cache, metaspace, stacks): give the heap half.
HEAP_SHARE = 0.5


def program(language: str, code: str, limits: Limits, code_dir: str = "/code") -> tuple[list[str], dict[str, bytes]]:
    """The argv that runs `code` and the files it needs (names relative to `code_dir`)."""
    lang = language.strip().lower()
    aliases = {"py": "python", "python3": "python", "sh": "bash", "shell": "bash", "js": "node",
               "javascript": "node", "nodejs": "node"}
    lang = aliases.get(lang, lang)
    heap = max(32, int(limits.memory_mb * HEAP_SHARE))
    source = code.encode("utf-8")
    if lang == "python":
        return ["python3", "-u", f"{code_dir}/main.py"], {"main.py": source}
    if lang == "bash":
        return ["bash", f"{code_dir}/main.sh"], {"main.sh": source}
    if lang == "node":
        return ["node", f"--max-old-space-size={heap}", f"{code_dir}/main.js"], {"main.js": source}
    if lang == "java":
        # Source-file mode compiles and runs in one JVM; serial GC and C1 keep the thread count (which
        # counts against the process limit) and start-up memory small.
        return [
            "java", f"-Xmx{heap}m", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-XX:CICompilerCount=1", "-Xshare:auto", f"{code_dir}/Main.java",
        ], {"Main.java": source}
    raise ToolError(f"unknown language {language!r}; choose one of: {', '.join(LANGUAGES)}")


MEMORY_MARKERS = ("MemoryError", "java.lang.OutOfMemoryError", "JavaScript heap out of memory",
                  "Cannot allocate memory", "std::bad_alloc", "out of memory")


def looks_out_of_memory(stderr: str) -> bool:
    """Whether a failed run's stderr says it ran out of memory (the rlimit makes malloc fail)."""
    tail = stderr[-4000:]
    return any(marker in tail for marker in MEMORY_MARKERS)
