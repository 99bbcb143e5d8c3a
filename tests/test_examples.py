"""Every example kernel against its PyTorch reference, in each dtype and mode."""

from __future__ import annotations

import functools
import importlib
import inspect

import pytest
import torch
from conftest import DEVICE, EXAMPLES

import tilecraft as tc
from tilecraft.demo import CPU_SHAPES
from tilecraft.testing import assert_close

MODULES = sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))
# divisible by the default block sizes, ragged, and a single row
SHAPES = [(16, 64), (37, 129), (1, 300), (7, 1)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def example_kernels() -> list[tuple[str, str]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        found += [(name, k) for k, _ in inspect.getmembers(module, _is_kernel)]
    return found


def _is_kernel(value: object) -> bool:
    return isinstance(value, tc.Kernel)


def test_examples_are_found() -> None:
    assert "add" in MODULES and len(example_kernels()) >= len(MODULES)


@pytest.mark.parametrize("module_name", MODULES)
def test_example_has_main_and_reference(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert callable(module.main) and callable(module.reference) and callable(module.inputs)
    assert any(_is_kernel(v) for v in vars(module).values()), "an example defines a tc.Kernel"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize(("module_name", "kernel_name"), example_kernels())
def test_example_kernel(module_name, kernel_name, dtype, shape, mode) -> None:
    module = importlib.import_module(module_name)
    kernel = mode(getattr(module, kernel_name))
    args = module.inputs(shape=shape, dtype=dtype, device=DEVICE)
    assert_close(kernel(*args), module.reference(*args), dtype)


@pytest.mark.parametrize("module_name", MODULES)
def test_example_main(
    module_name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module(module_name)
    if not torch.cuda.is_available() and module_name in CPU_SHAPES:
        # the demo's CPU shapes: fewer rows for the interpreter, each as long as by default
        shape = CPU_SHAPES[module_name]
        monkeypatch.setattr(module, "inputs", functools.partial(module.inputs, shape=shape))
    module.main()
    assert "ok" in capsys.readouterr().out


def test_the_demo_loads_every_example() -> None:
    """`tilecraft demo` imports every example, also ones that import each other."""
    from tilecraft.demo import example_kernels, find_examples, load_example

    folder = find_examples()
    modules = [load_example(path) for path in sorted(folder.glob("*.py"))]
    assert all(example_kernels(m) for m in modules)
