"""The GPU benchmark scripts of issue 6 run end to end on the CPU, on tiny shapes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import tilecraft as tc
from tilecraft.language import Choice

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import benchmarks/NAME.py; the settings it changes are undone after the test."""
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_EFFORT", "none")
    # scripts run on CPU set TRITON_INTERPRET for their process: in a test process on a GPU
    # machine it must not outlive the test (later kernels would be interpreted)
    if "TRITON_INTERPRET" in os.environ:
        monkeypatch.setenv("TRITON_INTERPRET", os.environ["TRITON_INTERPRET"])
    else:
        monkeypatch.setenv("TRITON_INTERPRET", "0")  # recorded as unset, so restored unset
        monkeypatch.delenv("TRITON_INTERPRET")
    spec = importlib.util.spec_from_file_location(f"_script_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the smoke runs interpret Triton in this process: where Triton compiles for a GPU they cannot
CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="interprets Triton (CPU only)")


@CPU_ONLY
def test_bench_overhead_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_overhead", monkeypatch)
    out = tmp_path / "overhead.json"
    result = script.main(["--device", "cpu", "--tiny", "--out", str(out)])
    assert json.loads(out.read_text())["us_per_call"] == result["us_per_call"]
    assert {"tilecraft", "launcher", "triton", "torch"} <= set(result["us_per_call"])
    operator_rows = {"op call, stub launch", "registered op fwd+bwd, stub launch"}
    assert operator_rows <= set(result["us_per_call"])
    assert (result["specializations"], result["compiled_configs"]) == (1, 1)  # no recompiles
    assert result["goal_met"] is None  # judged on a GPU only
    checks = result["fast_launch"]["checks"]
    assert len(checks) == 4 and all(c["equal"] for c in checks.values()), checks
    assert {"tilecraft, fast launch off", "fast launch"} <= set(result["us_per_call"])


def test_bench_model_host_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_model", monkeypatch)
    x = torch.randn(8)
    rows = script.host_profile(lambda: torch.relu(x).sum(), torch.device("cpu"), steps=3)
    assert rows and all(r["own_us_per_step"] >= 0 for r in rows)
    assert any("relu" in r["function"] and r["calls_per_step"] == 1 for r in rows), rows
    assert "relu" in script.profile_table("torch eager", rows)


@CPU_ONLY
@pytest.mark.slow  # torch.compile with inductor: about 20 s more on a cold cache
def test_bench_model_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_model", monkeypatch)
    out = tmp_path / "model.json"
    results = script.main(["--device", "cpu", "--tiny", "--out", str(out)])["results"]
    assert json.loads(out.read_text())["results"] == results
    for mode in ("tilecraft eager", "tilecraft compile", "torch compile"):
        assert results[mode]["matches_torch"], (mode, results[mode])
        assert results[mode]["ms_per_step"] > 0
    assert "skipped" in results["tilecraft graph"] and "skipped" in results["torch graph"]


def test_defaults_vs_helion_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("defaults_vs_helion", monkeypatch)
    out = tmp_path / "defaults.json"
    result = script.main(["--smoke", "--only", "kl_div", "--out", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["case"] == "helion kl_div" and "error" not in row, row
    assert row["tilecraft"]["ms"] > 0 and row["helion_rule"]["ms"] > 0
    assert result["goal_met"] is None  # judged on a GPU only


def test_bench_model_takes_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_model", monkeypatch)
    modes = script.parse(["--device", "cpu", "--modes", "tilecraft eager, torch eager"]).modes
    assert modes == ["tilecraft eager", "torch eager"]
    assert script.unselected("tilecraft compile", modes)
    assert not script.unselected("torch eager", [])
    with pytest.raises(SystemExit):
        script.parse(["--device", "cpu", "--modes", "tilecraft"])
    assert script.parse(["--device", "cpu", "--dtype", "bf16"]).dtype == "bfloat16"
    assert script.parse(["--device", "cpu"]).dtype == "float32"


def test_bench_energy_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_energy", monkeypatch)
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))  # the script sets it
    out = tmp_path / "energy.json"
    result = script.main(["softmax", "--smoke", "--classic", "softmax", "--out", str(out)])
    assert json.loads(out.read_text())["rows"][0]["kernel"] == "softmax"
    row = result["rows"][0]
    for part in ("time_objective", "energy_objective"):
        assert row[part]["energy_j"] > 0 and row[part]["ms"] > 0
        assert row[part]["tuning_energy_j"] > 0  # the simulated meter's idle power
    assert row["energy_objective"]["pareto"]  # energy was measured for every trial
    assert row["classic_search"]["search"] == "pattern"
    assert "| softmax |" in script.tables(result["rows"])


@CPU_ONLY
def test_bench_attention_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny shape, causal and not: tilecraft's kernels checked and timed (causal ones
    launched longest first too), SDPA's flash backend as the peer (cuDNN's records its
    error on the CPU), the Helion-style source run by tilecraft, the JSON written."""
    script = load_script("bench_attention", monkeypatch)
    out = tmp_path / "attention.json"
    data = script.main(["--smoke", "--out", str(out)])
    assert json.loads(out.read_text())["results"] == data["results"]
    assert [row["causal"] for row in data["results"]] == [False, True]
    for row in data["results"]:
        for direction in ("forward", "backward"):
            assert row["tilecraft"][direction]["best"]["rel_err"] < 1e-4
            assert row["tflops"]["tilecraft"][direction] > 0
            assert row["tflops"]["flash"][direction] > 0
            # the first trial is the kernel's default config, what an untuned call runs
            default = row["tilecraft"][direction]["trials"][0]
            assert default["default"] and default["rel_err"] < 1e-4
            assert row["tflops"]["tilecraft_default"][direction] > 0
        assert "error" in row["peers"]["cudnn"]
        # the Helion-style source: Helion absent here (its error), tilecraft runs it
        assert "error" in row["helion"] and row["helion_port"]["best"]["rel_err"] < 1e-4
        assert row["tflops"]["helion_port"]["forward"] > 0
    reversed_trials = [
        t
        for t in data["results"][1]["tilecraft"]["forward"]["trials"]
        if t["fields"].get("reversed_launches") == [True]
    ]
    assert reversed_trials and reversed_trials[0]["rel_err"] < 1e-4  # longest programs first
    table = script.markdown(data["results"])
    assert table.count("\n") == 3 and "Helion fwd" in table and "default fwd" in table


@CPU_ONLY
def test_bench_attention_causal_masked_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--causal-only --masked-baseline` (the quick causal comparison): the causal case
    alone (of the shape asked for, without the Helion-style kernel), its best configs
    timed again compiled without the alignment proofs (checked too), and the table's extra
    columns."""
    script = load_script("bench_attention", monkeypatch)
    options = ["--smoke", "--causal-only", "--masked-baseline", "--out", str(tmp_path / "a.json")]
    data = script.main([*options, "--shapes", "1x1x21x16", "--no-helion"])
    [row] = data["results"]
    assert row["causal"] and data["environment"]["masked_baseline"]
    assert row["shape"] == [1, 1, 21, 16] and "helion_port" not in row
    for direction in ("forward", "backward"):
        masked = row["tilecraft_masked"][direction]["best"]
        assert masked["config"] == row["tilecraft"][direction]["best"]["config"]
        assert masked["rel_err"] < 1e-4 and row["tflops"]["tilecraft_masked"][direction] > 0
    table = script.markdown(data["results"])
    assert "vs masked" in table and table.count("\n") == 2


@CPU_ONLY
def test_bench_conv_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny 3x3 and depthwise layers: tilecraft's kernels (forward on both layouts, and the
    gradients) checked against PyTorch and timed, the ratios and their geometric means
    written (one config each: no time budget for sweeps; the other kernels are tested in
    test_nn_conv2d.py)."""
    script = load_script("bench_conv", monkeypatch)
    out = tmp_path / "conv.json"
    options = ["--smoke", "--backward", "--budget-s", "0", "--kinds", "3x3,depthwise"]
    data = script.main([*options, "--out", str(out)])
    assert json.loads(out.read_text())["geomeans"] == data["geomeans"]
    kernels = [row["tilecraft"]["kernel"] for row in data["rows"]]
    assert kernels == ["conv2d_gemm", "conv2d_depthwise"]
    assert data["rows"][-1]["tilecraft"]["kernel_nchw"] == "conv2d_depthwise_planes"
    for row in data["rows"]:
        for layout in ("nhwc", "nchw"):
            assert row["tilecraft"][layout]["best"]["rel_err"] < 1e-4, (row["name"], layout)
        for name, gradient in row["backward"].items():
            if name != "cudnn_ms":
                assert gradient["best"]["rel_err"] < 1e-4, (row["name"], name)
        ratios = ("nhwc_vs_cudnn_nhwc", "nchw_vs_cudnn_nchw", "backward_vs_cudnn_backward")
        assert all(row["ratios"][r] > 0 for r in ratios), row["ratios"]
    assert set(data["geomeans"]) == {"3x3", "depthwise", "all but depthwise"}


@CPU_ONLY
def test_tune_vs_helion_lanes_and_merge_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both lanes' dry runs (Helion skips with its reason where it cannot run), then the
    merge of their files by kernel."""
    script = load_script("tune_vs_helion", monkeypatch)
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_WORKERS", "0")
    common = ["--smoke", "--kernels", "softmax,long_sum", "--cache", str(tmp_path / "cache")]
    ours = script.main([*common, "--lane", "tilecraft", "--out", "tc.json"])
    for row in ours["rows"]:
        assert row["tilecraft"]["configs"] == 2 and row["tilecraft"]["error"] < 1e-4, row
        assert "skipped" in row["torch_compile"]
    assert [r["unseen"] for r in ours["rows"]] == [False, True]
    theirs = script.main([*common, "--lane", "helion", "--out", "h.json"])
    assert all("skipped" in r["helion"] and "tilecraft" not in r for r in theirs["rows"])
    merged = script.main(["--merge", str(tmp_path / "h.json"), str(tmp_path / "tc.json")])
    assert [sorted(r) for r in merged["rows"]] == [
        ["helion", "kernel", "shape", "tilecraft", "torch_compile", "unseen"]
    ] * 2
    assert script.selected(script.parse(["--half", "2"])) == list(script.CASES)[4:]
    defaults = script.main([*common, "--defaults", "--out", "d.json"])
    for row in defaults["rows"]:
        assert row["tilecraft_default"]["error"] < 1e-4 and "skipped" in row["helion_default"]
    assert "| kernel tilecraft/Helion |" in script.either_table(defaults["rows"])


@CPU_ONLY
def test_bench_bmm_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_bmm", monkeypatch)
    out = tmp_path / "bmm.json"
    result = script.main(["--smoke", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    for shape in result["results"]:
        rows = {r["label"]: r for r in shape["rows"]}
        assert all("error" not in r for r in rows.values()), rows
        assert rows["flat 16x16x16"]["flat"] and not rows["3-D 2x16x16x16"]["flat"]
        assert max(r.get("max_error", 0) for r in rows.values()) < 1e-4


@CPU_ONLY
def test_bench_conv_smoke_nchw_pointwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--kinds 1x1 --nchw --backward`: the NCHW 1x1 layer runs the GEMM over planes (its own
    sweep, with the launch-order and TMA variants) and its gradients, each checked."""
    script = load_script("bench_conv", monkeypatch)
    out = tmp_path / "conv.json"
    options = ["--smoke", "--nchw", "--backward", "--kinds", "1x1", "--layers", "1x1"]
    data = script.main([*options, "--out", str(out)])
    (row,) = data["rows"]
    assert row["tilecraft"]["kernel_nchw"] == "conv2d_pointwise_planes"
    assert row["tilecraft"]["nhwc"]["best"] is None and "compile" not in row["peers_ms"]
    trials = row["tilecraft"]["nchw"]["trials"]
    assert any(t["config"]["loop_orders"][0] == [1, 0, 2] for t in trials)
    assert all(t["rel_err"] < 1e-4 for t in trials), trials
    assert set(row["backward"]) == {
        "pointwise_planes_input_grad",
        "pointwise_planes_weight_grad",
        "cudnn_ms",
    }
    assert row["backward_layout"] == "nchw"
    assert row["ratios"]["nchw_vs_cudnn_nchw"] > 0 and "nhwc_vs_cudnn_nhwc" not in row["ratios"]


def test_bench_conv_sweeps_depthwise_tiles_of_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The channels-last depthwise stencil tries tiles of rows (`tile_rows` > 1) after its
    tiles of positions (strided) or after its default (stride 1, where it streams by
    default), then (stride 1) streaming runs of rows (`stream_rows`); the NCHW planes
    stencil has no such knobs. Bound on meta tensors."""
    from tilecraft.nn.conv2d import plan

    script = load_script("bench_conv", monkeypatch)
    x = torch.empty(32, 144, 56, 56, dtype=torch.bfloat16, device="meta")
    w = torch.empty(144, 1, 3, 3, dtype=torch.bfloat16, device="meta")
    nhwc = x.contiguous(memory_format=torch.channels_last)
    op, args = plan(nhwc, w, padding=1, groups=144)
    configs = script._sweep(op.kernel, args, deadline=float("inf"))
    flat, rows = len(script.DEPTHWISE_SWEEP), script.DEPTHWISE_ROWS_SWEEP
    default = script._stream(4, 16, 32, 4)  # the stencil's default at stride 1: not repeated
    streams = [e["stream_rows"] for e in script.DEPTHWISE_STREAM_SWEEP if e != default]
    tiled = [r[0] for r in rows] + [1] * len(streams)
    assert [c.to_dict()["tile_rows"] for c in configs] == [1, *tiled]
    assert [c.to_dict()["stream_rows"] for c in configs] == [4] + [0] * len(rows) + streams
    assert configs[1].to_dict()["block_sizes"][2:4] == [16, 64]
    last = configs[-1].to_dict()
    assert [last["stream_cols"], last["stream_channels"]] == [16, 32]
    assert [c.to_dict()["stream_ahead"] for c in configs[-3:]] == [1, 0, 2]
    op, args = plan(nhwc, w, stride=2, padding=1, groups=144)  # strided: no streaming
    strided = script._sweep(op.kernel, args, deadline=float("inf"))
    assert len(strided) == flat + len(rows) and all(not c.get("stream_rows") for c in strided)
    op, args = plan(x, w, padding=1, groups=144)
    assert all("tile_rows" not in c.to_dict() for c in script._sweep(op.kernel, args, 0.0))


def test_bench_conv_sweeps_split_k_on_deep_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-50's res5 3x3 layer (few output tiles) tries split-K configs second; res3's
    (many tiles) does not. Bound on meta tensors: nothing runs."""
    from tilecraft.nn.conv2d import plan

    script = load_script("bench_conv", monkeypatch)
    for size, channels, split in ((7, 512, True), (28, 128, False)):
        x = torch.empty(32, channels, size, size, dtype=torch.bfloat16, device="meta")
        w = torch.empty(channels, channels, 3, 3, dtype=torch.bfloat16, device="meta")
        op, args = plan(x.contiguous(memory_format=torch.channels_last), w, padding=1)
        configs = script._sweep(op.kernel, args, deadline=float("inf"))
        splits = [c.to_dict().get("splits") for c in configs]
        assert script.wants_split(op.kernel, args) == split
        # (configs that clamp to the same one are tried once)
        assert splits[:4] == [1, 2, 2, 4] if split else set(splits) == {1}, splits
        assert set(splits[4:]) == {1} and len(splits) >= 4, splits


@CPU_ONLY
def test_profile_host_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("profile_host", monkeypatch)
    out = tmp_path / "profile.json"
    result = script.main(["--steps", "2", "--top", "5", "--out", str(out)])
    assert json.loads(out.read_text())["launches"] == result["launches"] == 29
    layers = result["layers"]
    assert layers["operator calls"]["us_per_step"] >= layers["kernel calls"]["us_per_step"] > 0
    assert layers["launchers"]["calls_per_step"] == 25 and "warning" not in result
    assert result["launch_path"]["fast_status"] == "fast"  # against Triton's JITFunction.run


@CPU_ONLY
def test_profile_host_compiled_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled graph calls every operator through the dispatcher: same launches."""
    script = load_script("profile_host", monkeypatch)
    argv = ["--steps", "2", "--top", "5", "--compile", "--dtype", "bf16"]
    result = script.main([*argv, "--out", str(tmp_path / "profile.json")])
    assert result["launches"] == 29 and result["compile"] and "warning" not in result
    assert "operator calls" not in result["layers"]
    assert result["layers"]["kernel calls"]["calls_per_step"] == 25


@CPU_ONLY
def test_micro_host_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("micro_host", monkeypatch)
    out = tmp_path / "micro.json"
    result = script.main(["--iters", "20", "--repeats", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    kernels, ops = {"matmul kernel", "add kernel"}, {"add op, no grad", "add op, grad (forward)"}
    ops.add("add op through the dispatcher, no grad (as compiled graphs call it)")
    launch = {"fast launch, launcher a no-op (3 tensors, an int, a constexpr)"}
    assert set(result) == kernels | ops | launch
    assert all(us > 0 for us in result.values())


def test_bench_manifest_says_where_the_time_went(monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_manifest", monkeypatch)
    phases = {"compile_sum": 30.0, "compile_max": 9.0, "timing": 4.0, "retime": 2.0, "plan": 1.0}
    time_s = script.where_time_went(phases, wall=10.0, gpus=2)
    assert time_s["timing_s"] == 6.0 and time_s["gpu_idle_share"] == 0.7
    assert time_s["compile_cpu_s"] == 30.0 and time_s["host_s"] == 1.0
    run = {"workers": 2, "wall_s": 10.0, "trials": 7, "time_s": time_s}
    assert "| 2 GPU | 10.0 | 7 | 30.0 | 9.0 | 6.0 | 1.0 | 0.0 | 70% |" in script.table([run])


@pytest.mark.slow
@CPU_ONLY
def test_bench_manifest_smoke(tmp_path: Path) -> None:
    """In a process of its own: recording needs kernels no earlier test has bound."""
    out = tmp_path / "manifest.json"
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path), "OUT": str(tmp_path)}
    env.pop("TRITON_INTERPRET", None)  # recorded eagerly, as a CPU user's step runs
    command = [sys.executable, str(BENCHMARKS / "bench_manifest.py"), "--smoke", "--runs", "1"]
    done = subprocess.run(command + ["--out", str(out)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["failed_entries"] == 0 and run["trials"] > 0 and "| 1 GPU |" in done.stdout


def test_vision_library_peers_attach_by_case_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """kornia and OpenCV peers go to the cases whose names start with their keys; a library
    that is not installed gives no peers (and says so) rather than failing the run."""
    import importlib

    from benchmarks import vision_peers

    script = load_script("bench_vision", monkeypatch)
    cases = [script.Case(name, int, int, 1.0, 0) for name in ("nv12_to_rgb", "gaussian_blur 5")]
    vision_peers.attach(cases, {"gaussian_blur": float, "resize": str}, "lib")
    assert [case.peers for case in cases] == [{}, {"lib": float}]
    real = importlib.import_module

    def missing(name: str, *args: object) -> object:
        if name in ("kornia", "cv2"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", missing)
    frames = torch.zeros(1, 4, 6, 3, dtype=torch.uint8)
    assert vision_peers.kornia_peers(frames, (2, 3)) == {}
    assert vision_peers.opencv_peers(frames, (2, 3)) == {}


def test_bench_model_paired_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_model", monkeypatch)
    # the host slows down 3x in the second round, both modes alike: rounds of 2.1, 2.0, 2.0
    ours, peer = [2.0, 2.2, 6.0, 6.6, 2.0, 2.0], [1.0, 1.0, 3.0, 3.3, 1.0, 1.0]
    assert script.paired_ratio(ours, peer, steps=2) == pytest.approx(2.0)
    assert script.statistics.median(ours) / script.statistics.median(peer) == pytest.approx(2.1)


def test_bench_model_times_modes_in_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script("bench_model", monkeypatch)
    order: list[str] = []
    steps = {m: (lambda m=m: order.append(m)) for m in ("torch eager", "tilecraft eager")}
    args = script.parse(["--device", "cpu", "--rounds", "3"])
    times = script.time_rounds(steps, args)
    assert order == (["torch eager"] * 5 + ["tilecraft eager"] * 5) * 3
    assert all(len(t) == 15 for t in times.values())


@CPU_ONLY
def test_check_configs_finds_configs_that_disagree_with_eager_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every attention and convolution case agrees with eager mode at its default and a
    random config, the JSON written; a kernel whose output depends on its config (a
    stand-in for a miscompiled one) gets its disagreeing configs reported."""
    script = load_script("check_configs", monkeypatch)
    out = tmp_path / "configs.json"
    data = script.main(["--smoke", "--configs", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == data
    assert len(data["results"]) == 10
    assert all(row["agreed"] >= 1 and not row["wrong"] for row in data["results"])
    found = script.check(_shifted, (torch.randn(37),), 8)
    assert found["wrong"] and {w["config"]["shift"] for w in found["wrong"]} == {1}


@tc.kernel
def _shifted(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    shift = tc.register_tunable("shift", Choice(0, 1))  # its default, 0, is the right one
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + shift
    return out
