"""Compiling for a GPU on a CPU machine (`tilecraft.testing.compile_for_gpu`): Triton's real
compiler, to the binary, for sm_90, where the interpreter would run what a GPU refuses."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
from conftest import needs_nvidia_backend

import tilecraft as tc
from tilecraft.exc import LoweringError
from tilecraft.runtime import crosscompile
from tilecraft.runtime.guard import SlowCompileWarning
from tilecraft.testing import check_modes, compile_for_gpu

pytestmark = needs_nvidia_backend


@tc.kernel
def merged_ints(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            a = x[i, t]
            if f[i] > 0:  # a scalar's `if`: both arms' `j` must have one Triton type
                j = 3
            elif f[i] < -1:
                j = 4
            else:
                j = torch.where(a > 0, 1, 2)  # noqa: SIM108 - a select of two ints
            out[i, t] = a + j


def test_an_int_select_merges_with_an_int() -> None:
    """`torch.where(c, 1, 2)` is int64 as PyTorch's is (Triton's own is int32, and its `if`
    refused to merge it with an int64: on the H200 only, before this compile check)."""
    x, f = torch.randn(3, 20), torch.tensor([1.0, -3.0, 0.0])
    out = torch.zeros(3, 20)

    def reference(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> tuple:
        picks = torch.where(x > 0, 1.0, 2.0)
        j = torch.where(f[:, None] > 0, 3.0, torch.where(f[:, None] < -1, 4.0, picks))
        return x, f, x + j

    check_modes(merged_ints, (x, f, out), reference, torch.float32)
    compile_for_gpu(merged_ints, (x, f, out), tc.Config(block_sizes=[16]))


def test_misaligned_views_and_every_dtype_compile() -> None:
    @tc.kernel
    def scaled(x: torch.Tensor, out: torch.Tensor, s: float) -> None:
        for t in tc.tile(x.size(0)):
            out[t] = (x[t].float() * s).to(out.dtype)

    for dtype in (torch.float16, torch.bfloat16, torch.int8, torch.float64):
        x = torch.arange(40).to(dtype)[1:]  # a view 1 element past 16-byte alignment
        compile_for_gpu(scaled, (x, torch.empty(39, dtype=dtype), 0.5))
        assert crosscompile.Pointer(dtype, x.data_ptr() % 16).stand_in().data_ptr() % 16 == (
            x.data_ptr() % 16
        )


def test_a_refused_compile_names_the_users_line(tmp_path: Path) -> None:
    """What Triton's compiler refuses comes back from the worker at the user's line."""
    user = tmp_path / "user.py"
    user.write_text("x = 1\nif v: j = 1\n")
    code = (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def bad(out, v):\n"
        f"    # {user}:2\n"
        "    if v > 0:\n"
        "        j = tl.full([16], 1, tl.int64)\n"
        "    else:\n"
        "        j = tl.full([16], 2, tl.int32)\n"
        "    tl.store(out + tl.arange(0, 16), j)\n"
    )
    path = tmp_path / "generated.py"
    path.write_text(code)
    launch = crosscompile.Launch("bad", (1,), (crosscompile.Pointer(torch.int64, 0), 3), {})
    kind, message, loc = crosscompile._worker().ask((str(path), code, [launch], 90))
    assert kind == "CompilationError"
    assert "Mismatched type" in message
    assert loc is not None and (loc.filename, loc.lineno) == (str(user), 2)


def test_the_interpreted_mode_still_runs_after_compiling() -> None:
    """The compile runs in its worker: this process's interpreter is left as it was."""
    x = torch.randn(37)

    @tc.kernel
    def double(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in tc.tile(x.size(0)):
            out[t] = x[t] * 2
        return out

    compile_for_gpu(double, (x,))
    torch.testing.assert_close(double(x), x * 2)


def test_a_config_past_the_gpus_shared_memory_runs_its_safe_config() -> None:
    """Triton finds a kernel's shared memory too large only when it loads it on the GPU,
    where a first call then runs the safe config with a warning: the compile for sm_90
    compares the binary's shared memory with the GPU's and warns the same way."""
    from matmul import matmul

    x, y = (torch.randn(512, 512, dtype=torch.bfloat16) for _ in range(2))
    big = tc.Config(block_sizes=[128, 128, 64], num_stages=8, num_warps=8)  # 7 x 32 KiB
    with pytest.warns(SlowCompileWarning, match="262144 bytes of shared memory"):
        compile_for_gpu(matmul, (x, y), big)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_for_gpu(matmul, (x, y), tc.Config(block_sizes=[128, 128, 64], num_stages=3))


def test_a_compile_past_its_time_or_a_dead_worker_is_an_error(tmp_path: Path) -> None:
    """A worker that does not answer in time is stopped, one that died is reported, and
    the next request starts a fresh one."""
    code = "import time\ntime.sleep(30)\n"  # the worker execs the module: it sleeps
    path = tmp_path / "slow.py"
    path.write_text(code)
    worker = crosscompile._worker()
    with pytest.raises(LoweringError, match="took over"):
        worker.ask((str(path), code, [], 90), timeout_s=1)
    assert worker.process.poll() is not None
    fresh = crosscompile._worker()
    assert fresh is not worker
    exiting = "import os\nos._exit(3)\n"
    path.write_text(exiting)
    with pytest.raises(LoweringError, match="exit status 3"):
        fresh.ask((str(path), exiting, [], 90))
    killed = crosscompile._worker()
    killed.process.kill()
    killed.process.wait()
    with pytest.raises(LoweringError, match="died"):  # its pipe is broken
        killed.ask((str(path), exiting, [], 90))
    x = torch.randn(9)
    compile_for_gpu(merged_ints, (x.view(3, 3), x[:3], torch.zeros(3, 3)))


@tc.kernel
def running_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.empty_like(x), torch.empty_like(x)
    for j, k in tc.tile([x.size(1), x.size(2)]):
        best = torch.cummax(x[:, j, k], 0)  # down the first dim: through shared memory
        values[:, j, k], indices[:, j, k] = best.values, best.indices
    return values, indices


def test_a_scans_shared_memory_counts_in_the_default_config() -> None:
    """A cummax down a 3-D int64 tile's first dim holds its values and indices in shared
    memory (16 bytes an element): the default config counted none, asked sm_90 for
    256 KiB, and a GPU's first call fell back to the safe config (fuzz seeds 215-216)."""
    x = torch.randint(-9, 9, (40, 24, 72))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_for_gpu(running_max, (x,))
    check_modes(running_max, (x,), lambda x: torch.cummax(x, 0))


@tc.kernel
def block_stores(x: torch.Tensor, flags: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    best = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for t in tc.tile(x.size(0)):
        row = x[t, :]
        best[t] = row.amax(1)  # a uint8 max, which Triton computes as int32
        flags[t] = row.sum(1) > 0  # a bool tile into a bool tensor (int8 in Triton)
        zeros[t] = 0.0  # a number
    return best


@pytest.mark.skipif(
    not os.environ.get("TILECRAFT_CROSS_PYTHONPATH"),
    reason="needs the Triton 3.6 that `make test` installs (3.9 has no block pointers)",
)
def test_block_pointer_stores_take_the_tensors_element_type(monkeypatch) -> None:
    """A block-pointer store takes the pointer's element type exactly (a pointer store
    converts): a uint8 max (int32 in Triton), a bool tile (a bool tensor is int8 there) and
    a number failed to compile on an H200 with `indexing="block_ptr"`, which this machine's
    Triton 3.9 no longer has (the configs drawn here never tried it)."""
    from tilecraft.codegen import access

    monkeypatch.setattr(access, "supported_indexing", lambda: ["pointer", "block_ptr"])
    x = torch.randint(0, 255, (33, 5), dtype=torch.uint8)
    args = (x, torch.empty(33, dtype=torch.bool), torch.empty(33))
    compile_for_gpu(block_stores, args, tc.Config(block_sizes=[16], indexing="block_ptr"))
