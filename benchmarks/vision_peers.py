"""Library peers of `bench_vision.py`'s cases: kornia on the GPU and OpenCV on the CPU.

Each is timed doing the same job as tilecraft's kernel, the way its users call it: kornia
takes float images (its inputs are converted once, before timing, so a kornia row moves 4x
the bytes of a uint8 one); OpenCV runs one frame at a time on the host's CPU (its frames
copied to host memory once, before timing). Their outputs are not checked against
tilecraft's: OpenCV's area resize and Gaussian kernel differ from torchvision's, and kornia
works in [0, 1]. A library that is not installed is skipped.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

Fn = Callable[[], Any]


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - a wheel built for another torch fails here
        print(f"{name} peers skipped: {type(e).__name__}: {e}")
        return None


def kornia_peers(frames: torch.Tensor, out_size: tuple[int, int]) -> dict[str, Fn]:
    """Case-name prefix -> a kornia call doing that case's job (float inputs)."""
    kornia = _module("kornia")
    if kornia is None:
        return {}
    n, h, w, _ = frames.shape
    x = frames.permute(0, 3, 1, 2).float()
    unit = x / 255
    half = (max(1, h // 2), max(1, w // 2))
    y, uv = unit[:, :1], unit[:, 1:, ::2, ::2] - 0.5  # NV12's planes, as kornia takes them
    mean = torch.tensor([0.485, 0.456, 0.406], device=x.device)
    std = torch.tensor([0.229, 0.224, 0.225], device=x.device)
    resize, normalize = kornia.geometry.transform.resize, kornia.enhance.normalize

    def pipeline(aa: bool) -> Fn:
        return lambda: normalize(resize(unit, out_size, antialias=aa), mean, std).half()

    return {
        "rgb_to_gray": lambda: kornia.color.rgb_to_grayscale(unit),
        "nv12_to_rgb": lambda: kornia.color.yuv420_to_rgb(y, uv),
        "normalize": lambda: normalize(unit, mean, std).half(),
        "resize bilinear f32": lambda: resize(x, half, antialias=False),
        "resize antialiased f32": lambda: resize(x, half, antialias=True),
        "gaussian_blur": lambda: kornia.filters.gaussian_blur2d(x, (5, 5), (1.1, 1.1)),
        "resize bilinear u8": lambda: resize(x, out_size, antialias=False),
        "resize antialiased u8": lambda: resize(x, out_size, antialias=True),
        "preprocess bilinear": pipeline(False),
        "preprocess antialiased": pipeline(True),
    }


def opencv_peers(frames: torch.Tensor, out_size: tuple[int, int]) -> dict[str, Fn]:
    """Case-name prefix -> OpenCV on the CPU doing that case's job, frame by frame (the
    normalization of the preprocess in numpy)."""
    cv2 = _module("cv2")
    if cv2 is None:
        return {}
    host = [f.numpy() for f in frames.cpu()]
    floats = [f.astype(np.float32) for f in host]
    n, h, w, _ = frames.shape
    nv12 = [np.concatenate([f[:, :, 0], f[: h // 2, :, 1]]) for f in host]
    half, size = (max(1, w // 2), max(1, h // 2)), (out_size[1], out_size[0])
    mean = np.array([0.485, 0.456, 0.406], np.float32) * 255
    inv_std = 1 / (np.array([0.229, 0.224, 0.225], np.float32) * 255)
    linear, area = cv2.INTER_LINEAR, cv2.INTER_AREA

    def each(images: list, op: Callable[[Any], Any]) -> Fn:
        return lambda: [op(image) for image in images]

    def preprocess(interp: int) -> Callable[[Any], Any]:
        def op(image: Any) -> Any:
            small = cv2.resize(image, size, interpolation=interp).astype(np.float32)
            return ((small - mean) * inv_std).transpose(2, 0, 1).astype(np.float16)

        return op

    return {
        "rgb_to_gray": each(host, lambda f: cv2.cvtColor(f, cv2.COLOR_RGB2GRAY)),
        "nv12_to_rgb": each(nv12, lambda f: cv2.cvtColor(f, cv2.COLOR_YUV2RGB_NV12)),
        "resize bilinear f32": each(floats, lambda f: cv2.resize(f, half, interpolation=linear)),
        "resize antialiased f32": each(floats, lambda f: cv2.resize(f, half, interpolation=area)),
        "gaussian_blur": each(floats, lambda f: cv2.GaussianBlur(f, (5, 5), 1.1)),
        "resize bilinear u8": each(host, lambda f: cv2.resize(f, size, interpolation=linear)),
        "resize antialiased u8": each(host, lambda f: cv2.resize(f, size, interpolation=area)),
        "preprocess bilinear": each(host, preprocess(linear)),
        "preprocess antialiased": each(host, preprocess(area)),
    }


def attach(cases: list, peers: dict[str, Fn], label: str) -> None:
    """Add each peer to the case whose name starts with its key."""
    for case in cases:
        for prefix, fn in peers.items():
            if case.name.startswith(prefix):
                case.peers[label] = fn
