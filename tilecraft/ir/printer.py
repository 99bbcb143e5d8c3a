"""A readable text form of the tile IR, for debugging and tests."""

from __future__ import annotations

from tilecraft.ir.nodes import Access, Branch, DeviceKernel, Loop, Node, Value


def _arg(a: object) -> str:
    if isinstance(a, Value):
        return f"%{a.name}"
    if isinstance(a, Access):
        subs = ", ".join(_index(i) for i in a.indices)
        return f"{a.param.name}[{subs}]"
    return repr(a)


def _index(i: object) -> str:
    kind = getattr(i, "kind", "")
    if kind == "block":
        offset, step = i.offset, i.step  # type: ignore[attr-defined]
        where = f"[{offset}::{step}]" if (offset, step) != (0, 1) else ""
        return f"b{i.block}{where}"  # type: ignore[attr-defined]
    if kind == "newaxis":
        return "None"
    return _arg(i.value)  # type: ignore[attr-defined]


def _lines(body: list[Node], depth: int) -> list[str]:
    pad = "  " * depth
    out: list[str] = []
    for node in body:
        if isinstance(node, Loop):
            carried = ", ".join(c.name for c in node.carried)
            blocks = ", ".join(f"b{b}" for b in node.blocks)
            head = f"while {node.cond.name}" if node.cond is not None else f"loop {blocks}"
            out.append(f"{pad}{head} carry({carried}):")
            out += _lines(node.body, depth + 1)
            continue
        if isinstance(node, Branch):
            out += _branch(node, depth)
            continue
        args = ", ".join(_arg(a) for a in node.args)
        attrs = "".join(f", {k}={_arg(v)}" for k, v in node.attrs.items())
        lhs = f"{node.out!r} = " if node.out else ""
        out.append(f"{pad}{lhs}{node.name}({args}{attrs})")
    return out


def _branch(node: Branch, depth: int) -> list[str]:
    pad = "  " * depth
    merged = ", ".join(f"%{m.out.name}={m.name}" for m in node.merged)
    out = [f"{pad}if %{node.cond.name} merge({merged}):"]
    out += _lines(node.then, depth + 1)
    for m in node.merged:
        out.append(f"{pad}  yield {m.name} = %{m.then.name}")
    out.append(f"{pad}else:")
    out += _lines(node.orelse, depth + 1)
    for m in node.merged:
        out.append(f"{pad}  yield {m.name} = %{m.orelse.name}")
    return out


def format_kernel(kernel: DeviceKernel) -> str:
    """The IR of a device kernel as text."""
    blocks = ", ".join(f"b{b.id}:{b.kind}[{b.begin}:{b.end}]" for b in kernel.blocks.values())
    params = ", ".join(p.name for p in kernel.params)
    head = [f"kernel {kernel.name}({params}) grid({kernel.grid_blocks}) blocks({blocks})"]
    return "\n".join(head + _lines(kernel.body, 1))
