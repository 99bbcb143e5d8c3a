"""Shared test setup: CPU execution modes and importable examples."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

# Triton reads TRITON_INTERPRET when a generated module is exec'd, so set it before any
# kernel compiles; without a GPU the interpreter is the only way to run Triton code.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    from triton.runtime import interpreter

    # Triton's interpreter checks every 32-bit integer add, sub and mul for overflow (an
    # int64 copy, two compares and an assert per op): half the time of some tests. Compiled
    # code wraps instead, as PyTorch does, and the tests check results against PyTorch.
    # (Triton's interpreter internals: where a version lacks them, the checks stay on)
    _builder = getattr(interpreter, "interpreter_builder", None)
    if hasattr(getattr(_builder, "options", None), "sanitize_overflow"):
        _builder.options = dataclasses.replace(_builder.options, sanitize_overflow=False)
# Keep generated code out of the user's cache (Settings read this when a Kernel is built).
os.environ.setdefault("TILECRAFT_CACHE_DIR", tempfile.mkdtemp(prefix="tilecraft-tests-"))

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))

# TILECRAFT_TEST_DEVICE=cuda runs the op tests on a GPU (compiled there, eager on it too)
DEVICE = os.environ.get("TILECRAFT_TEST_DEVICE", "cpu")
# tests that compile for sm_90 on the CPU (`tilecraft.testing.compile_for_gpu`)
needs_nvidia_backend = pytest.mark.skipif(
    importlib.util.find_spec("triton.backends.nvidia") is None,
    reason="this Triton has no NVIDIA backend",
)
# References in full float32 on a GPU, as tilecraft's float32 products are (PyTorch lets
# cuDNN convolutions round float32 inputs to TF32 by default; matmuls it does not)
torch.backends.cudnn.allow_tf32 = False

ApplyMode = Callable[[object], object]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With TILECRAFT_TEST_FAILURES set (a path), each failure's report is appended there as
    it happens: a GPU run cut short by its time limit keeps what it found (written by the
    main process only, which sees every worker's reports)."""
    path = os.environ.get("TILECRAFT_TEST_FAILURES")
    if path and report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


# CUDA errors after which the process's CUDA context is unusable: every later test on that
# worker would error on its first GPU call
LOST_CONTEXT = (
    "misaligned address",
    "illegal memory access",
    "unspecified launch failure",
    "device-side assert",
    "illegal instruction",
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and any(error in report.longreprtext for error in LOST_CONTEXT):
        item.stash[_CONTEXT_LOST] = True


_CONTEXT_LOST = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that faulted the GPU (a dead CUDA context) ends its xdist worker once its
    reports are sent: xdist starts a fresh one for the tests left, which would otherwise
    all error (779 of them in one run). xdist reports the exit as a second failure of it."""
    yield
    if item.stash.get(_CONTEXT_LOST, False) and "PYTEST_XDIST_WORKER" in os.environ:
        print(f"\n{item.nodeid} lost the CUDA context: this worker exits", file=sys.stderr)
        os._exit(3)


@pytest.fixture(params=["triton", "eager"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApplyMode]:
    """A function that puts a kernel into this mode (Triton or eager interpret) and returns it."""

    def apply(kernel: object) -> object:
        monkeypatch.setattr(kernel.settings, "interpret", request.param == "eager")
        return kernel

    apply.name = request.param  # type: ignore[attr-defined]
    yield apply


@pytest.fixture
def on_test_device() -> Iterator[None]:
    """Tensors made without a device go to the test device (a module's `pytestmark =
    pytest.mark.usefixtures("on_test_device")` runs its tests on a GPU there too)."""
    with torch.device(DEVICE):
        yield


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def known_bug(request: pytest.FixtureRequest, reason: str) -> None:
    """Mark the running test as failing on a logged tilecraft bug (see /tmp/tilecraft_bugs.md)."""
    request.applymarker(pytest.mark.xfail(strict=True, reason=f"bug: {reason}"))


def pytest_configure(config: pytest.Config) -> None:
    # Masked-off lanes of a ragged block load `other=0`, so the interpreter divides by
    # zero there; the results are discarded by the masked store.
    config.addinivalue_line("filterwarnings", "ignore::RuntimeWarning:triton.runtime.interpreter")
    config.addinivalue_line(
        "markers", "interpreter: runs CPU tensors through Triton's interpreter (skipped on a GPU)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a GPU machine (no TRITON_INTERPRET), tests that compile Triton code for CPU
    tensors cannot run: skip them there, with the reason."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    skip = pytest.mark.skip(reason="needs Triton's interpreter (CPU tensors), not set here")
    for item in items:
        if item.get_closest_marker("interpreter"):
            item.add_marker(skip)
