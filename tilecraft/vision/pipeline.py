"""A frame pipeline: a list of vision ops applied in order to a batch of frames.

    pipeline = Pipeline.parse("resize=640x360,blur=5,gray")
    out = pipeline(frames)  # frames: (N, H, W, 3) uint8, as decoders give them

Ops are small objects (`Resize`, `Letterbox`, `Crop`, `Flip`, `Gray`, `SwapRB`, `Blur`,
`BoxBlur`, `Normalize`), each calling one `tilecraft.vision` function. A resize or
letterbox directly followed by `Normalize` runs as the fused `preprocess` kernel: one pass
over memory instead of two. Frames stay in their layout until `Normalize`, which writes NCHW.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tilecraft.vision import color, filters, geometry, preprocessing
from tilecraft.vision.layout import check_layout

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class Resize:
    """Resize to `size` = (height, width): bilinear, nearest or area; antialiased or not."""

    size: tuple[int, int]
    interpolation: str = "bilinear"
    antialias: bool = False

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        args = (image, self.size, self.interpolation, layout, self.antialias)
        return geometry.resize(*args), layout


@dataclass(frozen=True)
class Letterbox:
    """Resize keeping the aspect ratio into `size` = (height, width), padded with `pad`."""

    size: tuple[int, int]
    pad: float = 114.0

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        return geometry.letterbox(image, self.size, self.pad, layout), layout


@dataclass(frozen=True)
class Crop:
    """The `height` x `width` window at (`top`, `left`)."""

    top: int
    left: int
    height: int
    width: int

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        window = (self.top, self.left, self.height, self.width)
        return geometry.crop(image, *window, layout=layout), layout


@dataclass(frozen=True)
class Flip:
    """Mirror left-right (`horizontal`) or top-bottom."""

    horizontal: bool = True

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        flip = geometry.hflip if self.horizontal else geometry.vflip
        return flip(image, layout), layout


@dataclass(frozen=True)
class Gray:
    """RGB to one channel of luma."""

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        return color.rgb_to_gray(image, layout), layout


@dataclass(frozen=True)
class SwapRB:
    """RGB <-> BGR."""

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        return color.rgb_to_bgr(image, layout), layout


@dataclass(frozen=True)
class Blur:
    """Gaussian blur of `kernel_size` (sigma as torchvision picks it unless given)."""

    kernel_size: int
    sigma: float | None = None

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        return filters.gaussian_blur(image, self.kernel_size, self.sigma, layout), layout


@dataclass(frozen=True)
class BoxBlur:
    """Mean over a `kernel_size` square."""

    kernel_size: int

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        return filters.box_blur(image, self.kernel_size, layout), layout


@dataclass(frozen=True)
class Normalize:
    """`(x / 255 - mean) / std` to NCHW `dtype` (ImageNet's statistics by default)."""

    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    dtype: torch.dtype = torch.float16

    def __call__(self, image: torch.Tensor, layout: str) -> tuple[torch.Tensor, str]:
        out = preprocessing.normalize(image, self.mean, self.std, self.dtype, layout, "NCHW")
        return out, "NCHW"

    def fused(self, op: Resize | Letterbox, image: torch.Tensor, layout: str) -> torch.Tensor:
        """`op` then this normalization, as one kernel."""
        pad = op.pad if isinstance(op, Letterbox) else 0.0
        boxed = isinstance(op, Letterbox)
        args = (image, op.size, self.mean, self.std, self.dtype, layout, boxed, pad)
        return preprocessing.preprocess(*args, antialias=_antialiased(op))


Op = Callable[[torch.Tensor, str], tuple[torch.Tensor, str]]


def _fusable(op: Op, following: Op | None) -> bool:
    bilinear = isinstance(op, Letterbox) or (
        isinstance(op, Resize) and op.interpolation == "bilinear"
    )
    return bilinear and isinstance(following, Normalize)


def _antialiased(op: Op | None) -> bool:
    return isinstance(op, Resize) and op.antialias


class Pipeline:
    """Ops applied in order to batches of frames; see the module's docstring."""

    def __init__(self, ops: Sequence[Op], layout: str = "NHWC") -> None:
        self.ops = list(ops)
        self.layout = check_layout(layout)

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        """The frames after every op (NCHW after a `Normalize`, else in their layout)."""
        image, layout, i = frames, self.layout, 0
        while i < len(self.ops):
            op, following = self.ops[i], self.ops[i + 1] if i + 1 < len(self.ops) else None
            if _fusable(op, following):
                assert isinstance(following, Normalize) and isinstance(op, (Resize, Letterbox))
                image, layout, i = following.fused(op, image, layout), "NCHW", i + 2
            else:
                (image, layout), i = op(image, layout), i + 1
        return image

    def from_nv12(self, y: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
        """NV12 frames (as `nv12_to_rgb` takes them) through the pipeline. When it starts
        with a bilinear resize (not antialiased) or a letterbox and `Normalize`, the
        conversion is fused into them (`preprocess_nv12`); otherwise the frames become RGB
        in this layout first."""
        first, second = (self.ops + [None, None])[:2]
        if first is None or not _fusable(first, second) or _antialiased(first):
            return self(color.nv12_to_rgb(y, uv, self.layout))
        assert isinstance(second, Normalize) and isinstance(first, (Resize, Letterbox))
        boxed = isinstance(first, Letterbox)
        pad = first.pad if isinstance(first, Letterbox) else 0.0
        args = (first.size, second.mean, second.std, second.dtype, boxed, pad)
        batch = preprocessing.preprocess_nv12(y, uv, *args)
        return Pipeline(self.ops[2:], "NCHW")(batch) if y.dim() == 3 else batch

    def __repr__(self) -> str:
        return f"Pipeline({self.ops!r}, layout={self.layout!r})"

    @classmethod
    def parse(cls, spec: str, layout: str = "NHWC") -> Pipeline:
        """A pipeline from `op[=value],...`: `resize=WxH` (bilinear), `resize_aa=WxH`
        (antialiased, as torchvision's default), `nearest=WxH`, `area=WxH`, `letterbox=WxH`,
        `crop=W:H:X:Y`, `hflip`, `vflip`, `gray`, `bgr`, `blur=K`, `box=K`,
        `normalize[=float16|bfloat16|float32]` (ImageNet's mean and std)."""
        return cls([parse_op(part.strip()) for part in spec.split(",") if part.strip()], layout)


def _size(text: str) -> tuple[int, int]:
    """`WxH` (width first, as video tools write it) as (height, width)."""
    width, height = (int(v) for v in text.lower().split("x"))
    return height, width


def _crop(text: str) -> Crop:
    width, height, x, y = (int(v) for v in text.split(":"))
    return Crop(y, x, height, width)


PARSERS: dict[str, Callable[[str], Op]] = {
    "resize": lambda v: Resize(_size(v)),
    "resize_aa": lambda v: Resize(_size(v), antialias=True),
    "nearest": lambda v: Resize(_size(v), "nearest"),
    "area": lambda v: Resize(_size(v), "area"),
    "letterbox": lambda v: Letterbox(_size(v)),
    "crop": _crop,
    "hflip": lambda v: Flip(True),
    "vflip": lambda v: Flip(False),
    "gray": lambda v: Gray(),
    "bgr": lambda v: SwapRB(),
    "blur": lambda v: Blur(int(v)),
    "box": lambda v: BoxBlur(int(v)),
    "normalize": lambda v: Normalize(dtype=DTYPES[v or "float16"]),
}


def parse_op(text: str) -> Op:
    """One op of a pipeline spec (`resize=640x360`, `gray`, ...)."""
    name, _, value = text.partition("=")
    if name not in PARSERS:
        raise ValueError(f"unknown op {name!r} in a pipeline: the ops are {', '.join(PARSERS)}")
    try:
        return PARSERS[name](value)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"bad value {value!r} for the pipeline op {name!r}: {e}") from None
