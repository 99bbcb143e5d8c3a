"""Mapping a failure inside generated code back to the user's source line.

The code generator writes a `# file:line` comment before the code of each user line; a
Triton error (a compile error on the GPU, an exception under the interpreter) is located
in the generated module, and the nearest comment above that line names the user's line.
"""

from __future__ import annotations

import linecache
import re
import traceback
from types import TracebackType
from typing import Any

import torch

from tilecraft.exc import HostCodeError, SourceLoc

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


def cpu_tensor_error(error: BaseException, code: str, path: str, kernels: list) -> Any:
    """A HostCodeError naming the CPU tensors a launch on the GPU was given (made in host
    code without `device=`), where Triton refused one; else None."""
    if not (isinstance(error, ValueError) and "cannot be accessed from Triton" in str(error)):
        return None
    frames = [f for f, _ in traceback.walk_tb(error.__traceback__) if f.f_code.co_filename == path]
    if not frames:
        return None
    frame, lines = frames[-1], code.splitlines()
    text = lines[frame.f_lineno - 1] if 0 < frame.f_lineno <= len(lines) else ""
    words = set(re.findall(r"\w+", text))
    names = [
        f"`{n}`"
        for n, v in frame.f_locals.items()
        if n in words and isinstance(v, torch.Tensor) and v.device.type == "cpu"
    ]
    loc = next((k.loc for k in kernels if f"{k.name}[" in text), None)
    verb = "is" if len(names) < 2 else "are"
    return HostCodeError(
        f"{', '.join(names) or 'a tensor'} passed to device code {verb} on the CPU, and the "
        "kernel runs on the GPU: create it on the arguments' device "
        "(`torch.empty(..., device=x.device)`)",
        loc,
    )
