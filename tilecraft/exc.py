"""The catalog of errors tilecraft raises, each naming the user's own source line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A place in the user's source: file, line, the text of that line and the column."""

    filename: str
    lineno: int
    text: str = ""
    col: int | None = None

    def __str__(self) -> str:
        where = f'File "{self.filename}", line {self.lineno}'
        if not self.text:
            return where
        shown = self.text.strip()
        if self.col is None:
            return f"{where}\n    {shown}"
        caret = max(self.col - (len(self.text) - len(self.text.lstrip())), 0)
        return f"{where}, column {self.col + 1}\n    {shown}\n    {' ' * caret}^"


class TilecraftError(Exception):
    """Base class of every tilecraft error; `loc` is the user's line when known."""

    def __init__(self, message: str, loc: SourceLoc | None = None) -> None:
        self.message = message
        self.loc = loc
        super().__init__(f"{message}\n  {loc}" if loc else message)

    def at(self, loc: SourceLoc) -> TilecraftError:
        """Return this error located at `loc` unless it already has a location."""
        return self if self.loc else type(self)(self.message, loc)


class UnsupportedSyntax(TilecraftError):
    """Python syntax that tilecraft cannot compile inside a kernel."""


class UnsupportedOperation(TilecraftError):
    """A call or operator that has no tile lowering."""


class ShapeMismatch(TilecraftError):
    """Tiles whose shapes do not broadcast, or an index of the wrong rank."""


class DtypeError(TilecraftError):
    """An operation applied to operands of a dtype it does not accept."""


class NotInKernel(TilecraftError):
    """A tile operation called outside a tilecraft kernel's device loop."""


class HostCodeError(TilecraftError):
    """The host code (outside `tc.tile` loops) failed for the given arguments."""


class BadArgument(TilecraftError):
    """Kernel arguments that cannot be used: wrong device, rank or dtype."""


class InvalidConfig(TilecraftError):
    """A Config that does not fit the kernel it is given to."""


class LoweringError(TilecraftError):
    """An internal failure while lowering an operation, reported at its source line."""


class IndexOutOfBounds(TilecraftError, IndexError):
    """A computed index outside its tensor, found by the bounds-check mode
    (TILECRAFT_CHECK=1); without it, such positions read 0 and are not written."""


class GraphCaptureError(TilecraftError):
    """A kernel's first call for some argument shapes (which compiles and may tune) made
    while a CUDA graph is being captured."""


class SettingsError(TilecraftError):
    """A setting (a `TILECRAFT_*` variable or a keyword of `tc.kernel`) with a value that
    cannot be used; the message names it and the values it accepts."""


class CacheDirError(TilecraftError):
    """A cache directory that must not be used (it belongs to another user)."""


class VideoError(TilecraftError):
    """A video that cannot be read or written (missing, corrupt, truncated, a codec FFmpeg
    lacks); the frames processed before it are kept, and the output file is closed."""


class ReportError(TilecraftError):
    """`tilecraft report` has nothing to draw (no database, an empty one, nothing that
    matches the kernel, shape or run asked for) or cannot draw (matplotlib is missing)."""


class TilecraftWarning(UserWarning):
    """Base of tilecraft's warnings (Helion's `helion.exc.BaseWarning`)."""


class TensorOperationInWrapper(TilecraftWarning):
    """Helion warns of tensor ops in a kernel's host code, which it cannot fuse. tilecraft
    runs host code as PyTorch does and never warns of it; the class exists so that
    `ignore_warnings=[helion.exc.TensorOperationInWrapper]` ports unchanged."""


class TensorOperationsInHostCall(TensorOperationInWrapper):
    """Helion's variant of `TensorOperationInWrapper` naming the ops (never raised here)."""


# Helion's names for the errors a ported kernel's callers catch (`helion.exc.X` with
# `import tilecraft as helion`): each is the tilecraft class raised for that failure.
Base = BaseError = TilecraftError
BaseWarning = TilecraftWarning
NotInsideKernel = DeviceAPIOnHost = NotInKernel
StatementNotSupported = UnsupportedSyntax
TypeInferenceError = DtypeError
InternalError = LoweringError
