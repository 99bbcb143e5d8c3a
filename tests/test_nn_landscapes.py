"""Landscapes of tilecraft.nn's attention and convolution kernels: recorded by
benchmarks/record_landscape.py (tiny shapes, Triton's interpreter), imported under the
keys a user's call has, learned from by the cost model and replayed by the fast search."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.features import describe
from tilecraft.autotune.landscape import Case, Landscape, import_landscapes, load_all
from tilecraft.autotune.model import CostModel
from tilecraft.autotune.replay import Replay
from tilecraft.autotune.search import make_search
from tilecraft.autotune.seeds import heuristic_seeds
from tilecraft.autotune.trial import Budget
from tilecraft.autotune.tune import tune_key
from tilecraft.nn import cases
from tilecraft.nn.attention import attention_op
from tilecraft.nn.conv2d import plan

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "record_landscape.py"
CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="interprets Triton (CPU only)")


def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
    spec = importlib.util.spec_from_file_location("_record_landscape", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cases_name_their_flags_and_survive_json() -> None:
    case = Case(cases.__name__, "attention_forward", (4, 16, 4096, 128), params=(("causal", True),))
    assert case.name == "attention_forward-4x16x4096x128-causal-bfloat16"
    assert Case.from_json(case.to_json()) == case
    plain = Case("softmax", "softmax", (8, 8))
    assert "params" not in plain.to_json() and Case.from_json(plain.to_json()) == plain


def test_case_arguments_are_those_of_the_public_functions() -> None:
    """A conv case binds the kernel `conv2d` picks, with the arguments it passes (so the
    tuning key is the user's); a shape that picks another kernel is refused."""
    _, bound, args = Case(cases.__name__, "conv2d_gemm", (2, 8, 9, 4, 3, 2)).bind("meta")
    x = torch.empty(2, 8, 9, 9, dtype=torch.bfloat16, device="meta")
    x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.empty(4, 8, 3, 3, dtype=torch.bfloat16, device="meta")
    op, user_args = plan(x, weight, stride=2, padding=1)
    assert op.kernel is cases.conv2d_gemm and op.kernel.bind(user_args).spec_key == bound.spec_key
    with pytest.raises(ValueError, match="conv2d_pointwise"):
        Case(cases.__name__, "conv2d_gemm", (2, 8, 9, 4, 1, 1)).bind("meta")
    _, dw, _ = Case(cases.__name__, "conv2d_depthwise", (2, 6, 9, 6, 3, 1, 6)).bind("meta")
    weight = torch.empty(6, 1, 3, 3, dtype=torch.bfloat16, device="meta")
    x = torch.empty(2, 6, 9, 9, dtype=torch.bfloat16, device="meta")
    x = x.contiguous(memory_format=torch.channels_last)
    op, user_args = plan(x, weight, padding=1, groups=6)
    assert op.kernel is cases.conv2d_depthwise
    assert op.kernel.bind(user_args).spec_key == dw.spec_key
    _, causal, _ = Case(cases.__name__, "attention_forward", (1, 2, 8, 16), "float32",
                        (("causal", True),)).bind("meta")  # fmt: skip
    assert ",True," in causal.spec_key


def test_backward_case_has_the_key_of_attentions_backward() -> None:
    """The backward's case (on "meta" as on a device) binds under the key the backward of
    `tilecraft.nn.attention` has: the forward's output (heads side by side) and statistics."""
    case = Case(cases.__name__, "attention_backward", (1, 2, 37, 16), "float32",
                (("causal", True),))  # fmt: skip
    q, k, v = (torch.randn(1, 2, 37, 16) for _ in range(3))
    bias, flags = q.new_empty(0), (True, 0.25, 0, False)
    out, stats = attention_op(q, k, v, bias, *flags)
    user = cases.attention_backward.bind((torch.randn_like(out), q, k, v, bias, out, stats, *flags))
    assert case.bind("meta")[1].spec_key == user.spec_key == case.bind("cpu")[1].spec_key
    assert "/strides" in user.spec_key  # the output's layout is part of the key


def test_backward_inputs_on_cpu_beside_a_gpu_run_the_forward_eagerly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where CPU kernels run eagerly (a process with a GPU), the backward case's forward
    runs so too: compiled, it went to the GPU with CPU tensors and Triton refused it."""
    shape = (1, 2, 37, 16)
    torch.manual_seed(0)
    compiled = cases.attention_backward_inputs(shape, torch.float32, "cpu", True)
    monkeypatch.setattr(cases, "cpu_mode", lambda: "eager")
    eager_calls: list[tuple] = []
    run_eagerly = cases.attention_forward.run_eagerly
    monkeypatch.setattr(
        cases.attention_forward, "run_eagerly", lambda a: eager_calls.append(a) or run_eagerly(a)
    )
    torch.manual_seed(0)
    eager = cases.attention_backward_inputs(shape, torch.float32, "cpu", True)
    assert len(eager_calls) == 1
    for got, want in zip(eager[5:7], compiled[5:7], strict=True):  # the output and statistics
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want)


@CPU_ONLY
def test_recorded_landscapes_feed_the_database_model_and_fast_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = script(monkeypatch)
    folder, db_path = tmp_path / "lands", tmp_path / "tuning.sqlite3"
    # the convolution's three kernels (the attention cases bind and describe alike: the
    # recorded H200 landscapes of test_learning.py cover them)
    options = ["--tiny", "--cases", "conv2d", "--configs", "5", "--dot-configs", "5"]
    options += ["--workers", "0"]
    assert record.main([*options, "--out", str(folder), "--db", str(tmp_path / "rec.db")]) == 0
    lands = load_all(folder)
    names = sorted(land.case.function for land in lands)
    assert names == ["conv2d_depthwise", "conv2d_gemm", "conv2d_pointwise"]
    assert all(any(t.ok for t in land.trials) for land in lands)
    with TuningDB(db_path) as db:
        assert import_landscapes(db, folder) == sum(len(land.trials) for land in lands)
        for land in lands:  # the user's call (same machine, same versions) finds its best
            _, bound, args = land.case.bind("cpu")
            assert db.load_best(tune_key(bound, args)) is not None, land.case.name
    groups = []
    for land in lands:
        _, bound, _ = land.case.bind("meta")
        groups.append((describe(bound, land.hardware), land.trials))
    model = CostModel.fit(groups)
    assert model is not None
    target = next(land for land in lands if land.case.function == "conv2d_gemm")
    _, bound, _ = target.case.bind("meta")
    space = target.space(bound)
    replay = Replay(target, space)
    budget = Budget(4, 30.0, clock=replay.clock)
    search = make_search("fast", space, replay, budget, seeds=heuristic_seeds(space),
                         model=model, description=describe(bound, target.hardware))  # fmt: skip
    search.run()
    assert replay.best_ms() is not None


def test_landscape_files_of_nn_kernels_load(tmp_path: Path) -> None:
    """A Landscape with params round-trips through its file."""
    case = Case(cases.__name__, "attention_forward", (1, 2, 8, 16), "float32", (("causal", True),))
    land = Landscape(case, "cpu", "v", {}, [])
    land.save(tmp_path / f"{case.name}.jsonl.gz")
    assert Landscape.load(tmp_path / f"{case.name}.jsonl.gz").case == case
