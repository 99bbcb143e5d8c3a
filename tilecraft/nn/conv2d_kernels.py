# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc,arg-type,operator,union-attr,call-overload"
"""The forward kernels of `tilecraft.nn.conv2d`: an implicit GEMM, a plain GEMM for 1x1
filters and a direct stencil for depthwise filters over NCHW planes (the channels-last one is
`conv2d_depthwise`'s), each with the fused epilogue `activation(conv + bias + residual)`.

Every kernel reads the image through its 4-D `(batch, channels, height, width)` subscripts,
so one body serves NCHW and channels-last memory: the generated code has the strides baked
in (the tensor's strides are part of what a kernel is specialized on), and no transposed
copy is made. Outputs take the input's memory format, as `F.conv2d`'s do.

The implicit GEMM's rows are output positions `(image, oh, ow)`, its columns the output
channels of one group and its reduction runs over `(tap, channel)`: the channels of a group
are padded to `span(channels)` (a power of two, at least 32) so that each block of the
reduction lies within one tap, and its channel indices stay consecutive (vector loads
along channels-last memory). Groups of fewer than 17 channels (an RGB stem's 3), where that
padding would at least double the work, run the reduction flat instead: unpadded, each
element finding its own tap.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.exc import InvalidConfig
from tilecraft.language.tunables import PowerOfTwo

# activation codes (PyTorch operators take ints, not strings)
NONE, RELU, SILU, GELU = 0, 1, 2, 3
ACTIVATIONS = {None: NONE, "relu": RELU, "silu": SILU, "gelu": GELU}
MIN_SPAN = 32  # the smallest padded channel count: eager mode's block size
MAX_K_SPLITS = 16  # split-K: at most this many chunks of a reduction
MIN_SPLIT_STEPS = 4  # blocks of 64 per chunk, at least (a pipelined loop needs a few)
SUM_ROWS = SUM_COLS = 64  # split-K's second pass (memory-bound): fixed tiles, no more knobs


def span(channels: int) -> int:
    """The padded extent of `channels` in a (tap, channel) reduction: a power of two, at least
    MIN_SPAN, so that every power-of-two block up to it divides it."""
    return max(MIN_SPAN, 1 << max(channels - 1, 0).bit_length())


def is_flat(channels: int) -> bool:
    """Whether a (tap, channel) reduction over `channels` per tap runs flat: unpadded, each
    element finding its own tap, where padding to `span` would at least double the work
    (fewer than 17 channels, such as an RGB image's 3)."""
    return span(channels) >= 2 * channels


def reduction_extent(channels: int) -> int:
    """The channels per tap of the (tap, channel) reduction: padded, or not when flat."""
    return channels if is_flat(channels) else span(channels)


def check_block(block_k: int, padded: int, flat: bool) -> None:
    """A (tap, channel) reduction block must lie within one tap: the config's block at most
    the padded channel count (the config space keeps it so; a hand-written config may not)."""
    if not flat and padded % block_k:
        raise InvalidConfig(
            f"the reduction block {block_k} must divide the padded channel count {padded}"
        )


def reduction_block(
    tile_k: Any, channels: int, taps: int, flat: bool, start: Any = 0
) -> tuple[Any, Any, Any]:
    """(tap, channel, real) of a block of the (tap, channel) reduction over `channels` per
    tap, `start` past the tile's own position (a chunk of a split reduction): the tap a
    scalar and the channels consecutive when padded, both per element when flat. `real`
    marks the elements that are neither padding channels nor past the last tap (they must
    read 0)."""
    index = tile_k.index + start
    if flat:
        tap, channel = index // channels, index % channels
        real = index < taps * channels
    else:  # a chunk's blocks past the last tap keep its tap (in range), masked by `real`
        tap = min((tile_k.begin + start) // span(channels), taps - 1)
        channel = index - tap * span(channels)
        real = (channel < channels) & (index < taps * span(channels))
    return tap, channel, real


def tap_offsets(tap: Any, kernel_w: int, flat: bool) -> tuple[Any, Any, Any, Any]:
    """Rows and columns of the taps: as offsets against [positions] columns ([1, block] or
    scalars), and as weight subscripts ([block, 1] or scalars)."""
    i, j = tap // kernel_w, tap % kernel_w
    rows, cols, rows_w, cols_w = i, j, i, j
    if flat:
        rows, cols, rows_w, cols_w = i[None, :], j[None, :], i[:, None], j[:, None]
    return rows, cols, rows_w, cols_w


def k_splits(reduction: int) -> PowerOfTwo:
    """Split-K chunk counts for a reduction of `reduction`: powers of two while each chunk
    keeps MIN_SPLIT_STEPS blocks of 64. Unsplit by default: on the H200 (bench_conv) the
    tuned split won on the deep layers (res5 1x1 reduce 1.43x with 2 chunks, res5 3x3 1.11x
    with 4) but 2 chunks lost on res5 3x3 (0.076 against 0.056 ms), and the landscapes,
    recorded before split-K, hold unsplit trials; the tuner picks the chunks."""
    high = max(1, min(MAX_K_SPLITS, reduction // (64 * MIN_SPLIT_STEPS)))
    return PowerOfTwo(1, 1 << (high.bit_length() - 1), 1)


def split_chunk(reduction: int, block: int, splits: int) -> int:
    """The reduction's extent per chunk of a split: whole blocks, so that every chunk but
    the last ends on a block boundary (its blocks stay within their taps)."""
    block = int(block)  # a plain int: symbolic sizes (torch.compile) do not take subclasses
    blocks = -(-reduction // block)
    return -(-blocks // splits) * block


def partial_sums(splits: int, dims: list[int], like: torch.Tensor) -> torch.Tensor:
    """Split-K's float32 partial sums `[splits, *dims]` (empty, of that rank, unsplit)."""
    size = [splits, *dims] if splits > 1 else [1] + [0] * len(dims)
    return torch.empty(size, dtype=torch.float32, device=like.device)


def input_at(out_pos: Any, tap: Any, stride: int, dil: int, pad: int) -> Any:
    """The input row (or column) that output row `out_pos` reads through tap row `tap`
    (outside the image where the tap meets padding)."""
    return out_pos * stride + (tap * dil - pad)


def output_at(in_pos: Any, tap: Any, stride: int, dil: int, pad: int) -> tuple[Any, Any]:
    """`input_at` inverted: the output row (or column) that read input row `in_pos` through
    tap row `tap`, and whether one did (the stride skips some; none lies before the first)."""
    rise = in_pos + (pad - tap * dil)
    return rise // stride, (rise >= 0) & (rise % stride == 0)


def saves_pre(act: int) -> bool:
    """Whether the backward needs the pre-activation (ReLU's gradient reads the output)."""
    return act in (SILU, GELU)


def _activate(acc: torch.Tensor, act: int) -> torch.Tensor:
    """`acc` through the activation `act` (float32)."""
    if act == RELU:
        acc = torch.relu(acc)
    if act == SILU:
        acc = acc * torch.sigmoid(acc)
    if act == GELU:
        acc = F.gelu(acc)
    return acc


def _new_output(
    x: torch.Tensor, out_ch: int, out_h: int, out_w: int, channels_last: bool
) -> torch.Tensor:
    """An uninitialized `(batch, out_ch, out_h, out_w)` result in x's memory format."""
    batch = x.size(0)
    if channels_last:
        nhwc = torch.empty([batch, out_h, out_w, out_ch], dtype=x.dtype, device=x.device)
        return nhwc.permute(0, 3, 1, 2)
    return torch.empty([batch, out_ch, out_h, out_w], dtype=x.dtype, device=x.device)


def _outputs(
    x: torch.Tensor, out_ch: int, out_h: int, out_w: int, channels_last: bool, act: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A forward kernel's uninitialized result (`_new_output`), and where the pre-activation
    is kept for the backward (empty when it is not needed)."""
    out = _new_output(x, out_ch, out_h, out_w, channels_last)
    return out, torch.empty_like(out) if saves_pre(act) else out.new_empty(0)


def _pixel_rows(image: torch.Tensor, images: int) -> torch.Tensor:
    """The (N, C, H, W) `image` as `images` matrices of pixel rows by channels, a view:
    NHWC memory is one matrix (`images` 1), NCHW a batch of transposes (`images` N)."""
    n, c, h, w = image.shape
    return image.permute(0, 2, 3, 1).reshape(images, n * h * w // images, c)


def _positions(rows: torch.Tensor, out_h: int, out_w: int) -> tuple[Any, Any, Any]:
    """(image, oh, ow) of flat output positions."""
    return rows // (out_h * out_w), rows % (out_h * out_w) // out_w, rows % out_w


def _add_patch_product(
    acc: torch.Tensor,
    tile_k: Any,
    sources: tuple[torch.Tensor, torch.Tensor],
    at: tuple,
    shape: tuple[int, int, int, bool],
    geometry: tuple[int, int, int, int, int, int],
) -> torch.Tensor:
    """`acc` plus one block of the implicit GEMM: the image patch of the output positions
    against the filter taps of the block's (tap, channel) positions; padding channels, other
    groups' channels and taps past the last read 0. `sources` are the image and the
    [kh, kw, cin_g, out_ch] filters, `at` the (image, oh, ow) of the rows, their group, the
    output channels and the chunk's start, `shape` (cin_g, taps, kernel_w, flat), `geometry`
    (stride_h, stride_w, pad_h, pad_w, dil_h, dil_w); a device helper."""
    x, filters = sources
    image, oh, ow, group, co, start = at
    cin_g, taps, kernel_w, flat = shape
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w = geometry
    tap, c, real = reduction_block(tile_k, cin_g, taps, flat, start)
    rows_k, cols, row_w, col_w = tap_offsets(tap, kernel_w, flat)
    ih = input_at(oh[:, None], rows_k, stride_h, dil_h, pad_h)
    iw = input_at(ow[:, None], cols, stride_w, dil_w, pad_w)
    ci = group * cin_g + c
    patch = tc.load(x, [image[:, None], ci[None, :], ih, iw], extra_mask=real[None, :])
    taps_w = tc.load(filters, [row_w, col_w, c[:, None], co[None, :]], extra_mask=real[:, None])
    return torch.addmm(acc, patch, taps_w)


def _epilogue(
    acc: torch.Tensor,
    where: list[Any],
    cols: Any,
    out: torch.Tensor,
    pre: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    flags: tuple[int, bool, bool],
) -> None:
    """Store `activation(acc + bias[cols] + residual[where])` to `out[where]`, and the
    pre-activation to `pre[where]` where the backward needs it: the forward kernels'
    epilogue. `flags` are (act, has_bias, has_residual); `cols` indexes the bias as the
    results' columns lie (`[1, block]`, or a scalar for one channel). Reads and writes are
    bounded (`tc.load`, `tc.store`): a ragged tile touches only its positions in range."""
    act, has_bias, has_residual = flags
    if has_bias:
        acc = acc + tc.load(bias, [cols]).to(torch.float32)
    if has_residual:
        acc = acc + tc.load(residual, where).to(torch.float32)
    if saves_pre(act):
        tc.store(pre, where, acc.to(pre.dtype))
    tc.store(out, where, _activate(acc, act).to(out.dtype))


@tc.kernel
def conv2d_gemm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    groups: int,
    out_h: int,
    out_w: int,
    act: int,
    has_bias: bool,
    has_residual: bool,
    channels_last: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Convolution as an implicit GEMM per group, then the epilogue; returns the output and
    the pre-activation (empty unless the activation's gradient needs it). With `splits` > 1
    (a tunable: split-K) each output tile's reduction is cut in that many chunks, summed in
    float32 by a second pass that applies the epilogue."""
    batch, _, height, width = x.size()
    out_ch, cin_g = weight.size(0), weight.size(1)
    cout_g = out_ch // groups
    kernel_w = tc.specialize(weight.size(3))
    taps = weight.size(2) * kernel_w
    flat, padded = is_flat(cin_g), reduction_extent(cin_g)
    # [kh, kw, cin_g, out_ch], rows of K: a view, with channels consecutive in a channels-last
    # weight (as `plan` passes it)
    filters = weight.permute(2, 3, 1, 0)
    out, pre = _outputs(x, out_ch, out_h, out_w, channels_last, act)
    flags = (act, has_bias, has_residual)
    shape = (cin_g, taps, kernel_w, flat)  # the reduction's, for _add_patch_product
    geometry = (stride_h, stride_w, pad_h, pad_w, dil_h, dil_w)
    rows, reduction = batch * out_h * out_w, taps * padded
    block_k = tc.register_block_size(16, padded if not flat else reduction)
    check_block(block_k, padded, flat)
    splits = tc.register_tunable("splits", k_splits(reduction))
    chunk = split_chunk(reduction, block_k, splits)
    parts = partial_sums(splits, [rows, out_ch], x)
    size = [splits * groups, rows, cout_g]
    for tile_sg, tile_m, tile_n in tc.tile(size, block_size=[1, None, None]):
        group, start = tile_sg.begin % groups, tile_sg.begin // groups * chunk
        image, oh, ow = _positions(tile_m.index, out_h, out_w)
        co = group * cout_g + tile_n.index
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        at = (image, oh, ow, group, co, start)
        for tile_k in tc.tile(chunk, block_size=block_k):  # this program's chunk
            acc = _add_patch_product(acc, tile_k, (x, filters), at, shape, geometry)
        if splits > 1:
            parts[tile_sg.begin // groups, tile_m.index[:, None], co[None, :]] = acc
        else:
            where = [image[:, None], co[None, :], oh[:, None], ow[:, None]]
            _epilogue(acc, where, co[None, :], out, pre, bias, residual, flags)
    # split-K's second pass: the chunks' sums added, then the epilogue (no programs unsplit)
    for tile_m, tile_n in tc.tile(
        [rows if splits > 1 else 0, out_ch], block_size=[SUM_ROWS, SUM_COLS]
    ):
        acc = parts[0, tile_m, tile_n]
        for s in range(1, splits):
            acc = acc + parts[s, tile_m, tile_n]
        image, oh, ow = _positions(tile_m.index, out_h, out_w)
        where = [image[:, None], tile_n.index[None, :], oh[:, None], ow[:, None]]
        _epilogue(acc, where, tile_n.index[None, :], out, pre, bias, residual, flags)
    return out, pre


@tc.kernel
def conv2d_pointwise(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    groups: int,
    out_h: int,
    out_w: int,
    act: int,
    has_bias: bool,
    has_residual: bool,
    channels_last: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A 1x1 convolution (stride 1, no padding, one group) as a plain GEMM per image:
    `[pixels, in_ch] @ [in_ch, out_ch]`; channels-last images are one GEMM over all their
    pixels, NCHW images one per image over pixel-major views (no copies either way). It
    takes `conv2d_gemm`'s arguments; the geometry ones are those of a 1x1 filter. Split-K
    (`splits` > 1) works as `conv2d_gemm`'s does."""
    batch, in_ch, height, width = x.size()
    out_ch = weight.size(0)
    pixels = height * width
    filters = weight.reshape(out_ch, in_ch).t()  # [in_ch, out_ch], a strided view
    out, pre = _outputs(x, out_ch, height, width, channels_last, act)
    flags = (act, has_bias, has_residual)
    images = 1 if channels_last else batch
    rows = pixels * batch // images
    block_k = tc.register_block_size(16, in_ch)
    splits = tc.register_tunable("splits", k_splits(in_ch))
    chunk = split_chunk(in_ch, block_k, splits)
    parts = partial_sums(splits, [images, rows, out_ch], x)
    x_rows, out_rows = _pixel_rows(x, images), _pixel_rows(out, images)
    pre_rows = _pixel_rows(pre, images) if saves_pre(act) else pre
    res_rows = _pixel_rows(residual, images) if has_residual else pre
    size = [splits * images, rows, out_ch]
    for tile_sb, tile_m, tile_n in tc.tile(size, block_size=[1, None, None]):
        image = tile_sb.begin % images
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        if splits > 1:  # this program's chunk of the channels (whole blocks but the last)
            start = tile_sb.begin // images * chunk
            for tile_k in tc.tile(start, min(start + chunk, in_ch), block_size=block_k):
                acc = torch.addmm(acc, x_rows[image, tile_m, tile_k], filters[tile_k, tile_n])
            parts[tile_sb.begin // images, image, tile_m, tile_n] = acc
        else:
            for tile_k in tc.tile(in_ch, block_size=block_k):
                acc = torch.addmm(acc, x_rows[image, tile_m, tile_k], filters[tile_k, tile_n])
            where = [image, tile_m, tile_n]
            _epilogue(acc, where, tile_n.index[None, :], out_rows, pre_rows, bias, res_rows, flags)
    # split-K's second pass: the chunks' sums added, then the epilogue (no programs unsplit)
    size = [images if splits > 1 else 0, rows, out_ch]
    for tile_b, tile_m, tile_n in tc.tile(size, block_size=[1, SUM_ROWS, SUM_COLS]):
        acc = parts[0, tile_b.begin, tile_m, tile_n]
        for s in range(1, splits):
            acc = acc + parts[s, tile_b.begin, tile_m, tile_n]
        where = [tile_b.begin, tile_m, tile_n]
        _epilogue(acc, where, tile_n.index[None, :], out_rows, pre_rows, bias, res_rows, flags)
    return out, pre


@tc.kernel
def conv2d_depthwise_planes(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    groups: int,
    out_h: int,
    out_w: int,
    act: int,
    has_bias: bool,
    has_residual: bool,
    channels_last: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A depthwise convolution of an NCHW image as a stencil over its planes: a program per
    (image, channel) plane and tile of rows by columns, whose taps are scalars and whose
    shifted reads run along contiguous rows (the [positions, channels] stencil would read
    channels a plane apart). It takes `conv2d_gemm`'s arguments (NCHW, groups == channels)."""
    batch, channels, height, width = x.size()
    kernel_h = tc.specialize(weight.size(2))
    kernel_w = tc.specialize(weight.size(3))
    filters = weight.reshape(channels, kernel_h * kernel_w)  # a view: no copy per call
    out, pre = _outputs(x, channels, out_h, out_w, False, act)
    flags = (act, has_bias, has_residual)
    planes = x.reshape(batch * channels, height, width)
    size = [batch * channels, out_h, out_w]
    for tile_p, tile_h, tile_w in tc.tile(size, block_size=[1, None, None]):
        image, c = tile_p.begin // channels, tile_p.begin % channels
        acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        for i in range(kernel_h):
            rows = input_at(tile_h.index, i, stride_h, dil_h, pad_h)
            for j in range(kernel_w):
                cols = input_at(tile_w.index, j, stride_w, dil_w, pad_w)
                shifted = planes[tile_p.begin, rows[:, None], cols[None, :]].to(torch.float32)
                acc = acc + shifted * filters[c, i * kernel_w + j].to(torch.float32)
        where = [image, c, tile_h.index[:, None], tile_w.index[None, :]]
        _epilogue(acc, where, c, out, pre, bias, residual, flags)
    return out, pre
