"""tilecraft.vision: image kernels written in tilecraft, on uint8 and float images.

Every function takes batched (4-D) or single (3-D) images, NCHW or NHWC (`layout=`), and
calls tilecraft kernels, whose sources in this package read as examples:

- color: `rgb_to_bgr`, `rgb_to_gray`, `nv12_to_rgb`, `i420_to_rgb` (BT.601 limited range);
- geometry: `hflip`, `vflip`, `crop`, `resize` (nearest, bilinear, area, antialiased),
  `letterbox`;
- filters: `gaussian_blur`, `box_blur`, `sobel`, `unsharp_mask` (reflected borders);
- statistics: `histogram` (atomics), `equalize` (torchvision's / PIL's);
- `normalize`, and `preprocess` (`preprocess_nv12`): resize (bilinear, or antialiased as
  torchvision's default, on the tensor cores) or letterbox + normalize to NCHW float16 in
  one pass;
- `Pipeline`: these ops applied in turn to batches of frames
  (`Pipeline.parse("resize=640x360,gray")`);
- `tilecraft.vision.video`: video files decoded, run through a pipeline, encoded
  (`video.process`, `tilecraft video`); `tilecraft.vision.streams`: several at once on CUDA
  streams; `BufferPool`: the buffers they reuse, so a steady frame allocates nothing.

Uint8 results are computed in float32, rounded half to even and saturated to 0..255.
"""

from __future__ import annotations

from tilecraft.vision.boxes import letterbox_box
from tilecraft.vision.color import (
    bgr_to_rgb,
    i420_to_rgb,
    nv12_to_rgb,
    rgb_to_bgr,
    rgb_to_gray,
    split_nv12,
)
from tilecraft.vision.filters import box_blur, gaussian_blur, sobel, unsharp_mask
from tilecraft.vision.geometry import crop, hflip, letterbox, resize, vflip
from tilecraft.vision.memory import BufferPool
from tilecraft.vision.pipeline import Pipeline
from tilecraft.vision.preprocessing import normalize, preprocess, preprocess_nv12
from tilecraft.vision.statistics import equalize, histogram

__all__ = [
    "BufferPool",
    "Pipeline",
    "bgr_to_rgb",
    "box_blur",
    "crop",
    "equalize",
    "gaussian_blur",
    "hflip",
    "histogram",
    "i420_to_rgb",
    "letterbox",
    "letterbox_box",
    "normalize",
    "nv12_to_rgb",
    "preprocess",
    "preprocess_nv12",
    "resize",
    "rgb_to_bgr",
    "rgb_to_gray",
    "sobel",
    "split_nv12",
    "unsharp_mask",
    "vflip",
]
