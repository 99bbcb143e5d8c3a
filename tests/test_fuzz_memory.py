"""Differential fuzzing of how kernels address memory: random kernels that load from and
store to host tensors through tiles (`x[tile_m, tile_n]`, tiles reaching past a tensor's
end), whole dims and partial slices (`x[tile_m, :]`, `x[tile_m, 2:7]`, `x[tile_m, ::2]`),
ints (negative ones count from the end), grid indices (`x[i + 1, tile_n]`, a computed
position that counts from the end when negative), computed index tiles
(`x[tile.index * 2 + 1]`, `x[tile.index - 3]`), loaded ids (`x[ids[tile]]`), `tc.load`
with `extra_mask=` and `other=`, `tc.store` with `extra_mask=`, stores under an `if` on a
tile, two stores to one place (the last wins), transposed and broadcast stores, inner
`tc.tile` loops with an accumulator, `tc.tile(begin, end, block_size=)` and the atomics
`atomic_add`, `atomic_max`, `atomic_min` on repeated positions.

The reference is a plain Python loop over every lane of the loops, modelling tilecraft's
bounds rules element by element (docs/language.md, tilecraft/language/indexing.py): a
position an index tile puts outside `0 <= i < size` reads `other` (0 unless given) and is
not written; a single computed position (a grid index, an int) counts from the end when
negative and is out of range outside `[-size, size)`. Kernels whose stores would race
(two lanes writing one place) are drawn again. Each kernel runs in both modes at the
default config, and a quarter again at a random config of its space.

Left out: NaN and -0.0 in values reaching `atomic_max`/`atomic_min` (NaN ordering differs
on GPUs, and a tie of zeros keeps either sign, as PyTorch's CPU maximum does), and float16
atomic adds (their rounding depends on the order of the adds).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from conftest import DEVICE
from fuzzing import load_kernels

from tilecraft.autotune.space import space_of
from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation
from tilecraft.testing import check_modes

SEED = 4242
KERNELS = 240
SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0]
REFUSALS = (UnsupportedOperation, ShapeMismatch, DtypeError)


@dataclass(frozen=True)
class Axis:
    """A dim of the loops: a tile's lanes, a grid index (one lane per program, a scalar in
    values) or a whole dim (`:` or a slice, its lanes 0 .. width-1)."""

    name: str  # the loop variable; "" for the whole dim
    kind: str  # "tile", "grid" or "whole"
    lanes: range


@dataclass
class Item:
    """One subscript of a tensor: its text, the axis it follows (None: a constant int),
    the position it gives each lane of that axis (None: a position no PyTorch index has,
    as ids read past their end) and whether it is one computed position (bounded to
    `[-size, size)`, counting from the end) rather than an index tile (`[0, size)`)."""

    text: str
    axis: Axis | None
    at: Any  # Callable[[int], int]
    scalar: bool


@dataclass
class Case:
    i: int
    source: str
    dtype: str
    x_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    ids: list[int]
    out_dtype: str
    atomic: str = ""  # "", "add", "max" or "min"
    reference: Any = None  # Callable[[x, ids, out], out]
    program: list = field(default_factory=list)


# -- subscripts ------------------------------------------------------------------------------
def ids_at(ids: list[int], p: int, scalar: bool) -> int:
    """`ids[p]` as a kernel reads it: 0 outside the bounds."""
    n = len(ids)
    if scalar:
        return ids[p] if -n <= p < n else 0
    return ids[p] if 0 <= p < n else 0


def lane_item(rng: random.Random, axis: Axis, ids: list[int], repeats: bool) -> Item:
    """An index following `axis`: injective in its lanes unless `repeats`."""
    t = axis.name
    if axis.kind == "grid":
        k = rng.choice([1, 2, -1, -2, 3])
        forms = [
            (t, lambda p: p),
            (f"{t} + {k}", lambda p: p + k),
            (f"ids[{t}]", lambda p: ids_at(ids, p, True)),
        ]
        if repeats:
            forms += [(f"{t} // 2", lambda p: p // 2), (f"{t} % 3", lambda p: p % 3)]
        text, at = rng.choice(forms)
        return Item(text, axis, at, True)
    k = rng.choice([1, 2, 5, -1, -3])
    forms = [
        (t, lambda p: p),
        (t, lambda p: p),
        (f"{t}.index + {k}", lambda p: p + k),
        (f"{t}.index * 2 + 1", lambda p: 2 * p + 1),
        (f"({t}.index - 3)", lambda p: p - 3),
        (f"ids[{t}]", lambda p: ids_at(ids, p, False)),
    ]
    if repeats:
        forms += [(f"{t}.index // 2", lambda p: p // 2), (f"{t}.index % 3", lambda p: p % 3)]
    text, at = rng.choice(forms)
    return Item(text, axis, at, False)


def whole_item(rng: random.Random, width: int) -> tuple[Item, int]:
    """`:` or a slice of `width` positions, and the size of the dim it slices."""
    if rng.random() < 0.4:
        return Item(":", None, lambda j: j, False), width
    start, step = rng.choice([0, 1, 2, 3]), rng.choice([1, 1, 2, 3])
    size = start + (width - 1) * step + 1 + rng.choice([0, 0, 1, 2]) if width else start
    stop = start + width * step
    text = f"{start}:{stop}" + (f":{step}" if step != 1 else "")
    if step == 2 and start == 0 and rng.random() < 0.5 and size in (2 * width - 1, 2 * width):
        text = "::2"
    return Item(text, None, lambda j: start + j * step, False), size


def static_item(rng: random.Random, size: int) -> Item:
    c = rng.randrange(-size, size)
    return Item(str(c), None, lambda _: c, True)


# -- kernels ---------------------------------------------------------------------------------
def tile_range(rng: random.Random, name: str) -> tuple[str, Axis]:
    """`tc.tile(...)` arguments (sizes or begin, end; maybe a block size) and its axis."""
    begin = rng.choice([0, 0, 0, 1, 3])
    end = begin + rng.choice([0, 1, 2, 5, 9, 17, 23])
    args = f"{end}" if begin == 0 and rng.random() < 0.5 else f"{begin}, {end}"
    if rng.random() < 0.3:
        args += f", block_size={rng.choice([1, 2, 4, 8, 16])}"
    return args, Axis(name, "tile", range(begin, end))


def loops(rng: random.Random) -> tuple[list[str], list[Axis]]:
    """The loop headers (outermost first) and the axes they make."""
    kind = rng.choice(["tile", "tile", "grid", "tile2", "nested", "grid_tile"])
    if kind in ("tile", "grid"):
        args, axis = tile_range(rng, "tile_m")
        if kind == "grid":
            axis = Axis("i", "grid", axis.lanes)
            args = args.split(", block_size")[0]
            return [f"for i in tc.grid({args}):"], [axis]
        return [f"for tile_m in tc.tile({args}):"], [axis]
    if kind == "tile2":
        (_, m), (_, n) = tile_range(rng, "tile_m"), tile_range(rng, "tile_n")
        begins = f"[{m.lanes.start}, {n.lanes.start}], [{m.lanes.stop}, {n.lanes.stop}]"
        if rng.random() < 0.3:
            begins += f", block_size=[{rng.choice([1, 4, 8])}, {rng.choice([2, 16])}]"
        return [f"for tile_m, tile_n in tc.tile({begins}):"], [m, n]
    outer, inner = tile_range(rng, "tile_m"), tile_range(rng, "tile_n")
    if kind == "grid_tile":
        m = Axis("i", "grid", outer[1].lanes)
        head = f"for i in tc.grid({m.lanes.start}, {m.lanes.stop}):"
    else:
        m, head = outer[1], f"for tile_m in tc.tile({outer[0]}):"
    return [head, f"for tile_n in tc.tile({inner[0]}):"], [m, inner[1]]


def layout(items: list[Item]) -> list[str]:
    """The axes of the value a subscript reads, in order (index tiles and whole dims)."""
    return [i.axis.name if i.axis else "" for i in items if not i.scalar]


def store_items(
    rng: random.Random, axes: list[Axis], ids: list[int], repeats: bool
) -> tuple[list[Item], list[int], Axis | None]:
    """`out`'s subscript (following every loop axis), its shape, and a whole dim if any."""
    items = [lane_item(rng, a, ids, repeats) for a in axes]
    whole = None
    if len(items) == 1 and rng.random() < 0.5:
        if rng.random() < 0.5:
            width = rng.choice([0, 1, 3, 5])
            whole = Axis("", "whole", range(width))
            extra, size = whole_item(rng, width)
            extra.axis = whole
        else:
            size = rng.choice([1, 3, 6])
            extra = static_item(rng, size)
        items.insert(rng.randrange(2), extra)
    elif len(items) == 2 and rng.random() < 0.3:
        items.reverse()  # a transposed store
    whole_or_int = [i.axis is None or i.axis.kind == "whole" for i in items]
    shape = [size if fixed else dim_size(rng) for fixed in whole_or_int]
    return items, shape, whole


def dim_size(rng: random.Random) -> int:
    return rng.choice([0, 1, 4, 7, 12, 17, 30]) if rng.random() < 0.9 else 0


def load_items(
    rng: random.Random, axes: list[Axis], whole: Axis | None, ids: list[int]
) -> tuple[list[Item], list[int]]:
    """`x`'s subscript (following some of the store's axes) and its shape."""
    followed = [a for a in axes if rng.random() < 0.8] or axes[:1]
    items = [lane_item(rng, a, ids, True) for a in followed]
    shape = [dim_size(rng) for _ in items]
    if whole is not None and rng.random() < 0.7:
        extra, size = whole_item(rng, len(whole.lanes))
        extra.axis = whole
        at = rng.randrange(len(items) + 1)
        items.insert(at, extra)
        shape.insert(at, size)
    elif len(items) == 1 and rng.random() < 0.3:
        size = rng.choice([1, 4, 9])
        at = rng.randrange(2)
        items.insert(at, static_item(rng, size))
        shape.insert(at, size)
    if len(items) == 2 and rng.random() < 0.2:
        items.reverse()
        shape.reverse()
    return items, shape


def text_of(items: list[Item], listed: bool = False) -> str:
    """A subscript's text; `listed`: as an index list (`tc.load(x, [...])`), slices spelled
    `slice(a, b, c)`."""
    texts = [spelled(i.text) if listed else i.text for i in items]
    vectors = [k for k, i in enumerate(items) if is_vector(i)]
    if len(vectors) == 2:  # (PyTorch pairs index tensors up: make them an outer product)
        for k, suffix in zip(vectors, ["[:, None]", "[None, :]"], strict=True):
            texts[k] = f"({texts[k]}){suffix}"
    return ", ".join(texts)


def is_vector(item: Item) -> bool:
    """An index tile (not a tile itself, which indexes as a slice)."""
    return item.axis is not None and item.axis.kind == "tile" and item.text != item.axis.name


def spelled(text: str) -> str:
    if ":" not in text:
        return text
    parts = [p or "None" for p in text.split(":")]
    return f"slice({', '.join(parts)})"


def reshaped(value: list[str], target: list[str]) -> str:
    """The text turning a value of axes `value` into one that broadcasts to `target`."""
    text = "v"
    kept = [a for a in target if a in value]
    if kept != value:
        text = "v.T"
    if kept != target:
        text += "[" + ", ".join(":" if a in value else "None" for a in target) + "]"
    return text


def lane_mask(rng: random.Random, axes: list[str], named: dict[str, Axis]) -> tuple[str, Any]:
    """An `extra_mask` over one tile axis of a value of `axes` (text, lane -> bool)."""
    tiles = [a for a in axes if a and named[a].kind == "tile"]
    if not tiles:
        return "", None
    t = rng.choice(tiles)
    c = rng.choice([2, 3])
    text = f"({t}.index % {c} != 1)"
    if len(axes) == 2:
        text += "[:, None]" if axes[0] == t else "[None, :]"
    return text, lambda lane: lane[t] % c != 1


def draw_load(rng, axes, whole, ids, dtype, named):
    """(the line loading `v`, x's items, x's shape, lane -> (mask, other))."""
    items, shape = load_items(rng, axes, whole, ids)
    if rng.random() < 0.5:
        return f"v = x[{text_of(items)}]", items, shape, None
    mask, keep = lane_mask(rng, layout(items), named)
    other = rng.choice([-7, 0, 5]) if dtype == "int32" else rng.choice([-1.5, 0.0, "-inf"])
    other_text = "float('-inf')" if other == "-inf" else str(other)
    args = f"x, [{text_of(items, True)}]" + (f", extra_mask={mask}" if mask else "")
    args += f", other={other_text}" if rng.random() < 0.7 else ""
    if "other=" not in args:
        other = 0
    value = float(other) if dtype != "int32" else other
    return f"v = tc.load({args})", items, shape, (keep, value)


def draw_stores(rng: random.Random, target: str, atomic: str) -> list[tuple[str, str, Any]]:
    """The store lines (a template over `{S}`, `{w}`), each with its condition and value:
    (kind, text, (cond(w) or None, value(w)))."""
    if atomic:
        masked = rng.random() < 0.3
        line = f"tc.atomic_{atomic}(out, [{{S}}], w" + (", extra_mask=w > 0)" if masked else ")")
        return [(atomic, line, (lambda w: w > 0) if masked else None, lambda w: w)]
    kinds = rng.sample(["plain", "twice", "masked", "if"], rng.choice([1, 1, 2]))
    out = []
    for kind in kinds:
        if kind == "plain":
            out.append(("store", "out[{S}] = w", None, lambda w: w))
        elif kind == "twice":
            out.append(("store", "out[{S}] = w * 2", None, lambda w: w * 2))
            out.append(("store", "out[{S}] = -w", None, lambda w: -w))
        elif kind == "masked":
            out.append(
                ("store", "tc.store(out, [{S}], w, extra_mask=w > 0)", lambda w: w > 0, lambda w: w)
            )
        else:
            out.append(
                ("store", "if w < 1:\n    out[{S}] = w * 2", lambda w: w < 1, lambda w: w * 2)
            )
    return out


# -- the reference: every lane, one at a time ------------------------------------------------
def position(items: list[Item], shape: list[int], lane: dict[str, int]) -> tuple | None:
    """Where `items` point at `lane`, or None where a position is out of range."""
    out = []
    for item, size in zip(items, shape, strict=True):
        p = item.at(lane[item.axis.name] if item.axis else 0)
        if item.scalar:
            if not -size <= p < size:
                return None
            p += size if p < 0 else 0
        elif not 0 <= p < size:
            return None
        out.append(p)
    return tuple(out)


def lanes_of(axes: list[Axis]) -> list[dict[str, int]]:
    return [
        dict(zip([a.name for a in axes], ps, strict=True))
        for ps in itertools.product(*(a.lanes for a in axes))
    ]


def get(values: Any, at: tuple) -> Any:
    for p in at:
        values = values[p]
    return values


def put(values: Any, at: tuple, value: Any) -> None:
    for p in at[:-1]:
        values = values[p]
    values[at[-1]] = value


@dataclass
class Spec:
    """What a drawn kernel does, for the reference."""

    axes: list[Axis]  # every lane's axes (the loops', and the whole dim's)
    load: list[Item]
    x_shape: list[int]
    masked: Any  # (lane -> bool or None, other) for tc.load, None for a subscript
    store: list[Item]
    out_shape: list[int]
    stores: list[tuple[str, str, Any, Any]]
    inner: str = ""  # the accumulator's inner axis ("" without one)
    zero: float = 0.0  # what a position out of range reads (0 in int32 kernels)


def value_at(spec: Spec, xs: Any, lane: dict[str, int]) -> Any:
    at = position(spec.load, spec.x_shape, lane)
    keep, other = spec.masked if spec.masked else (None, spec.zero)
    if at is None or (keep is not None and not keep(lane)):
        return other
    return get(xs, at)


def run_reference(spec: Spec, xs: Any, outs: Any) -> bool:
    """Apply the kernel to `outs` (nested lists) lane by lane; False where two lanes store to
    one place (a race: the kernel is drawn again)."""
    writer: dict[tuple, tuple] = {}
    for lane in lanes_of(spec.axes):
        w = value_at(spec, xs, lane)
        at = position(spec.store, spec.out_shape, lane)
        if at is None:
            continue
        for kind, _, cond, value in spec.stores:
            if cond is not None and not cond(w):
                continue
            old = get(outs, at)
            if kind == "store":
                key = tuple(lane.items())
                if writer.setdefault(at, key) != key:
                    return False
                put(outs, at, value(w))
            elif kind == "add":
                put(outs, at, old + w)
            else:
                put(outs, at, (max if kind == "max" else min)(old, w))
    return True


def run_accumulating(spec: Spec, xs: Any, outs: Any) -> bool:
    """The accumulator kernel: `out[S(m)] = sum over n of v(m, n)`; False where two lanes
    store to one place (ids read past their end give 0 to every lane: on a GPU, which
    lane's store lands is not defined, seed 4242 kernel 226)."""
    outer = [a for a in spec.axes if a.name != spec.inner]
    inner = [a for a in spec.axes if a.name == spec.inner]
    written: set[tuple] = set()
    for lane in lanes_of(outer):
        total = sum(value_at(spec, xs, {**lane, **n}) for n in lanes_of(inner))
        at = position(spec.store, spec.out_shape, lane)
        if at is not None:
            if at in written:
                return False
            written.add(at)
            put(outs, at, total)
    return True


HEADER = "\n@tc.kernel\ndef k{i}(x: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:\n"


def indent(lines: list[str], depth: int) -> str:
    pad = "    " * depth
    return "".join(pad + part + "\n" for line in lines for part in line.split("\n"))


def draw_accumulating(rng: random.Random, i: int, dtype: str, ids: list[int]) -> tuple | None:
    """An outer tile loop, an inner one summing a loaded tile into an accumulator."""
    (a, m), (b, n) = tile_range(rng, "tile_m"), tile_range(rng, "tile_n")
    named = {"tile_m": m, "tile_n": n}
    items, x_shape = load_items(rng, [m, n], None, ids)
    axes = layout(items)
    if "tile_n" not in axes:
        return None
    load, masked = f"x[{text_of(items)}]", None
    if rng.random() < 0.4:
        mask, keep = lane_mask(rng, axes, named)
        load = f"tc.load(x, [{text_of(items, True)}], extra_mask={mask})" if mask else load
        masked = (keep, 0) if mask else None
    acc = "torch.int32" if dtype == "int32" else "torch.float32"
    widened = "v" if dtype == "int32" else "v.to(torch.float32)"
    summed = f"{widened}.sum({axes.index('tile_n')})" if len(axes) == 2 else f"{widened}.sum()"
    if len(axes) == 1 or (len(axes) == 2 and "tile_m" not in axes):
        summed = f"{widened}.sum()"
    store, out_shape, _ = store_items(rng, [m], ids, False)
    body = [f"acc = tc.zeros([tile_m], dtype={acc})", f"for tile_n in tc.tile({b}):"]
    body += [f"    v = {load}", f"    acc = acc + {summed}.to({acc})"]
    body += [f"out[{text_of(store)}] = " + reshaped(["tile_m"], layout(store)).replace("v", "acc")]
    whole = [it.axis for it in store if it.axis is not None and it.axis.kind == "whole"]
    spec = Spec([m, n, *whole], items, x_shape, masked, store, out_shape, [], inner="tile_n")
    source = HEADER.format(i=i) + indent([f"for tile_m in tc.tile({a}):"], 1) + indent(body, 2)
    return source, spec, "int32" if dtype == "int32" else "float32"


def draw_plain(rng: random.Random, i: int, dtype: str, ids: list[int], atomic: str) -> tuple:
    heads, axes = loops(rng)
    named = {a.name: a for a in axes}
    store, out_shape, whole = store_items(rng, axes, ids, bool(atomic))
    line, items, x_shape, masked = draw_load(rng, axes, whole, ids, dtype, named)
    stores = draw_stores(rng, "", atomic)
    target = layout(store)
    body = [line, f"w = {reshaped(layout(items), target)}"]
    body += [
        text.replace("{S}", text_of(store, text.startswith("tc."))) for _, text, _, _ in stores
    ]
    all_axes = axes + ([whole] if whole else [])
    spec = Spec(all_axes, items, x_shape, masked, store, out_shape, stores)
    source = HEADER.format(i=i) + "".join(indent([h], d + 1) for d, h in enumerate(heads))
    return source + indent(body, len(heads) + 1), spec, dtype


def values(g: torch.Generator, shape: list[int], dtype: str, atomic: str) -> torch.Tensor:
    """Random values, a fifth of floats special (no NaN or -0.0 for atomic max/min)."""
    if dtype == "int32":
        return torch.randint(-20, 21, shape, generator=g, dtype=torch.int32)
    x = (torch.randn(shape, generator=g) * 12).round() / 4
    special = torch.tensor(SPECIAL[1:] if atomic in ("max", "min") else SPECIAL)
    pick = torch.randint(0, len(special), shape, generator=g)
    chosen = torch.rand(shape, generator=g) < 0.2
    x = torch.where(chosen, special[pick], x)
    return (x + 0.0 if atomic in ("max", "min") else x).to(getattr(torch, dtype))


def draw_case(rng: random.Random, i: int) -> Case | None:
    """A kernel and its inputs, or None where its stores race or nothing is checked."""
    dtype = rng.choice(["float32", "float32", "float16", "int32"])
    atomic = rng.choice(["add", "max", "min"]) if rng.random() < 0.2 else ""
    if atomic and dtype == "float16":  # (refused but for adds, whose order rounds)
        dtype = "float32"
    n_ids = rng.choice([0, 3, 9, 20, 30])
    if atomic:
        ids = [rng.randrange(-2, 8) for _ in range(n_ids)]
    else:
        ids = rng.sample(range(-3, 35), n_ids)
    drawn = None
    if not atomic and rng.random() < 0.15:
        drawn = draw_accumulating(rng, i, dtype, ids)
    drawn = drawn or draw_plain(rng, i, dtype, ids, atomic)
    source, spec, out_dtype = drawn
    spec.zero = 0 if dtype == "int32" else 0.0
    case = Case(i, source, dtype, tuple(spec.x_shape), tuple(spec.out_shape), ids, out_dtype)
    case.atomic, case.program = atomic, [spec]
    return case if expected(case) is not None else None


def laid_out(t: torch.Tensor, how: int) -> torch.Tensor:
    """`t` as a transposed copy's view (how 1), a view of every other column (how 2), or
    itself: addresses then take strides other than a contiguous tensor's."""
    if how == 1 and t.dim() == 2:
        return t.T.contiguous().T
    if how == 2:
        wide = t.new_zeros(*t.shape[:-1], t.shape[-1] * 2 + 1)
        wide[..., 1::2] = t
        return wide[..., 1::2]
    return t


def inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(case.i)
    x = values(g, list(case.x_shape), case.dtype, case.atomic)
    ids = torch.tensor(case.ids, dtype=torch.int64 if case.i % 2 else torch.int32)
    if case.atomic:
        out = values(g, list(case.out_shape), case.out_dtype, case.atomic)
    else:
        out = torch.full(case.out_shape, 99, dtype=getattr(torch, case.out_dtype))
    return laid_out(x, case.i % 5), ids, laid_out(out, case.i % 7)


def expected(case: Case) -> torch.Tensor | None:
    """What the kernel leaves in `out` (None where its stores race)."""
    x, _, out = inputs(case)
    spec = case.program[0]
    outs = out.tolist()
    run = run_accumulating if spec.inner else run_reference
    if not run(spec, x.tolist(), outs):
        return None
    return torch.tensor(outs, dtype=out.dtype).reshape(out.shape)


def cases(seed: int = SEED, count: int = KERNELS) -> list[Case]:
    rng = random.Random(seed)
    drawn: list[Case] = []
    while len(drawn) < count:
        case = draw_case(rng, len(drawn))
        drawn += [case] if case is not None else []
    return drawn


def check(module: Any, case: Case, config: Any = None) -> None:
    """The kernel in both modes against the reference; a clear refusal is a skip."""
    x, ids, out = (t.to(DEVICE) for t in inputs(case))
    want = expected(case)
    assert want is not None
    dtype = torch.float32 if case.atomic == "add" or case.program[0].inner else None
    check_modes(
        getattr(module, f"k{case.i}"),
        (x, ids, out),
        lambda x, ids, out: (x, ids, want.to(out.device)),
        dtype if case.out_dtype != "int32" else None,
        config=config,
    )


CASES = cases()


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    return load_kernels(tmp_path_factory, "fuzzed_memory", "".join(c.source for c in CASES))


@pytest.mark.parametrize("case", CASES, ids=[f"k{c.i}" for c in CASES])
def test_random_addressing_agrees_in_both_modes(module, case: Case) -> None:
    try:
        check(module, case)
    except REFUSALS as e:
        pytest.skip(f"refused: {str(e).splitlines()[0]}")


@pytest.mark.parametrize("case", CASES[::4], ids=[f"k{c.i}" for c in CASES[::4]])
def test_random_addressing_at_a_random_config(module, case: Case) -> None:
    """A quarter of the kernels again at a config drawn from their space: eager mode tiles
    as the config does, so both modes must still agree with the lane-by-lane reference."""
    kernel = getattr(module, f"k{case.i}")
    try:
        space = space_of(kernel.bind(inputs(case)), on_gpu=False)
        check(module, case, space.random(random.Random(SEED + case.i)))
    except REFUSALS as e:
        pytest.skip(f"refused: {str(e).splitlines()[0]}")


def test_few_kernels_are_refused(module) -> None:
    """The fuzzer covers what it means to: its kernels compile (a refusal is a skip
    above, which alone could never fail)."""
    refused = []
    for case in CASES[::5]:
        try:
            getattr(module, f"k{case.i}").bind(inputs(case)).to_triton_code()
        except REFUSALS as e:
            refused.append(f"k{case.i}: {str(e).splitlines()[0]}")
    assert len(refused) <= len(CASES[::5]) // 20, refused
