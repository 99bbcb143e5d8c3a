"""Mapping a failure inside generated code back to the user's source line.

The code generator writes a `# file:line` comment before the code of each user line; a
Triton error (a compile error on the GPU, an exception under the interpreter) is located
in the generated module, and the nearest comment above that line names the user's line.
"""

from __future__ import annotations

import linecache
import re
from types import TracebackType

from tilecraft.exc import SourceLoc

COMMENT = re.compile(r"^\s*# (.+):(\d+)$")


def user_location(error: BaseException, code: str, path: str) -> SourceLoc | None:
    """The user's line behind the generated line where `error` happened, if known."""
    lines = code.splitlines()
    line = _generated_line(error, lines, path)
    if line is None:
        return None
    for text in reversed(lines[:line]):
        match = COMMENT.match(text)
        if match:
            filename, lineno = match.group(1), int(match.group(2))
            return SourceLoc(filename, lineno, linecache.getline(filename, lineno))
    return None


def _generated_line(error: BaseException, lines: list[str], path: str) -> int | None:
    """The 1-based line of the generated module at which `error` was raised."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _from_compile_error(current, lines) or _from_traceback(current.__traceback__, path)
        if found:
            return found
        current = current.__cause__ or current.__context__
    return None


def _from_traceback(tb: TracebackType | None, path: str) -> int | None:
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            found = tb.tb_lineno  # the innermost frame in the generated module wins
        tb = tb.tb_next
    return found


def _from_compile_error(error: BaseException, lines: list[str]) -> int | None:
    """Triton's CompilationError holds the kernel's source and the failing AST node, whose
    line counts from the kernel's `def`."""
    src, node = getattr(error, "src", None), getattr(error, "node", None)
    lineno = getattr(node, "lineno", None)
    if not isinstance(src, str) or not src.strip() or not isinstance(lineno, int):
        return None
    first = src.splitlines()[0]
    if first not in lines:
        return None
    return lines.index(first) + lineno
