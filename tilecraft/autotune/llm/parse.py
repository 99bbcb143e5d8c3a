"""Turning a reply of the model into configs of the space: the JSON is found among any
prose or code fences, every proposal is checked knob by knob, and whatever cannot be
used is dropped (or snapped to the nearest valid value) with a reason."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from typing import Any

from tilecraft.autotune.space import ConfigSpace, Knob, PermutationKnob
from tilecraft.runtime.config import Config

MAX_REPLY_CHARS = 1 << 18  # a reply of configs is a few KB; more is refused unread
MAX_DEPTH = 16  # proposals nest 3 deep
_TOKEN = re.compile(r'[\[\]{}"]')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def parse_reply(
    text: str, space: ConfigSpace, measured: Collection[Config] = ()
) -> tuple[list[Config], list[str]]:
    """The new valid configs a reply proposes, and why anything else was dropped or
    changed. A reply with nothing usable gives `[]`, never an error."""
    found = extract_json(text)
    if found is None:
        return [], ["no JSON object found in the reply"]
    return found_configs(found, space, measured)


def found_configs(
    found: Any, space: ConfigSpace, measured: Collection[Config] = ()
) -> tuple[list[Config], list[str]]:
    """`parse_reply` for JSON already extracted from a reply."""
    proposals = found.get("configs") if isinstance(found, dict) else found
    if not isinstance(proposals, list):
        return [], ['the reply has no "configs" list']
    configs: list[Config] = []
    reasons: list[str] = []
    for i, proposal in enumerate(proposals):
        config = proposal_config(proposal, space, reasons, f"config {i}")
        if config is None:
            continue
        if config in measured or config in configs:
            reasons.append(f"config {i}: a duplicate, dropped")
        else:
            configs.append(config)
    return configs, reasons


def extract_json(text: str) -> Any:
    """The first JSON object (or list) in `text`: the whole text, a fenced block, or the
    first balanced `{...}`/`[...]` that parses; None if there is none (or `text` is
    longer than `MAX_REPLY_CHARS`). Linear in the text, and nesting deeper than
    `MAX_DEPTH` is refused rather than recursed into."""
    if len(text) > MAX_REPLY_CHARS:
        return None
    groups = _groups(text)
    for candidate in _candidates(text, groups):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    return None


def _candidates(text: str, groups: list[tuple[int, int]]) -> Iterator[str]:
    """The whole text, the fenced blocks, then each balanced group: those that could be
    JSON within the depth limit (text without brackets cannot nest at all)."""
    lead = len(text) - len(text.lstrip())
    whole = text.strip()
    if whole[:1] not in ("[", "{") or groups[:1] == [(lead, lead + len(whole))]:
        yield whole
    for part in text.split("```")[1::2]:
        block = part.removeprefix("json").strip()
        if block[:1] not in ("[", "{") or _groups(block)[:1] == [(0, len(block))]:
            yield block
    for begin, end in groups:
        yield text[begin:end]


def _groups(text: str) -> list[tuple[int, int]]:
    """(begin, end) of the balanced bracket groups of `text` that no balanced group
    encloses, in order, at most MAX_DEPTH deep; a bracket that never closes (prose) does
    not hide the groups inside it, and brackets in strings within groups do not count.
    One pass over the brackets and quotes."""
    starts: list[int] = []  # the open brackets, outermost first
    below: list[int] = []  # per open bracket: the depth of the deepest group closed in it
    inside: dict[int, list[tuple[int, int, int]]] = {}  # stack level -> groups closed in it
    top: list[tuple[int, int, int]] = []
    skip = 0
    for token in _TOKEN.finditer(text):
        at = token.start()
        if at < skip:
            continue
        char = text[at]
        if char == '"':
            if starts:
                string = _STRING.match(text, at)
                if string is None:
                    break
                skip = string.end()
        elif char in "[{":
            starts.append(at)
            below.append(0)
        elif starts:
            level = len(starts) - 1
            group = (starts.pop(), at + 1, below.pop() + 1)
            inside.pop(level, None)  # enclosed by this group now
            if level:
                below[-1] = max(below[-1], group[2])
                inside.setdefault(level - 1, []).append(group)
            else:
                top.append(group)
    for level in range(len(starts)):  # never closed: what they hold is top level
        top.extend(inside.get(level, ()))
    return sorted((begin, end) for begin, end, depth in top if depth <= MAX_DEPTH)


def proposal_config(
    proposal: Any, space: ConfigSpace, reasons: list[str], where: str
) -> Config | None:
    """The config of one proposal (knob name -> value, differences from the default)."""
    if not isinstance(proposal, dict):
        reasons.append(f"{where}: not a JSON object, dropped")
        return None
    knobs = {k.name: k for k in space.knobs}
    values: dict[str, Any] = {}
    for name, value in _expand_lists(proposal, knobs).items():
        knob = knobs.get(name)
        if knob is None:
            reasons.append(f"{where}: unknown knob {name!r} dropped")
            continue
        values[name] = _valid_value(knob, value, reasons, where)
    config = space.snap(values)
    if space.is_valid(config):
        return config
    repaired = space.repair(space.values(config))
    if repaired == space.default():
        reasons.append(f"{where}: exceeds the device's register or shared-memory budget, dropped")
        return None
    reasons.append(
        f"{where}: exceeds the device's register or shared-memory budget, shrunk to {repaired!r}"
    )
    return repaired


def _expand_lists(proposal: dict[str, Any], knobs: dict[str, Knob]) -> dict[str, Any]:
    """`{"block_sizes": [64, 32]}` as `{"block_sizes[0]": 64, "block_sizes[1]": 32}`."""
    out: dict[str, Any] = {}
    for name, value in proposal.items():
        if name not in knobs and isinstance(value, list) and f"{name}[0]" in knobs:
            out.update({f"{name}[{i}]": v for i, v in enumerate(value)})
        else:
            out[str(name)] = value
    return out


def _valid_value(knob: Knob, value: Any, reasons: list[str], where: str) -> Any:
    """`value` if the knob allows it, else the nearest valid value (with a reason)."""
    wanted = _coerce(knob, value)
    if wanted in knob.choices:
        return wanted
    snapped = knob.snap(wanted)
    reasons.append(f"{where}: {knob.name}={value!r} is not valid, snapped to {snapped!r}")
    return snapped


def _coerce(knob: Knob, value: Any) -> Any:
    """JSON spellings of valid values: lists for loop orders, numbers written as text."""
    if not isinstance(value, list) and value in knob.choices:
        return value
    if isinstance(knob, PermutationKnob) and isinstance(value, list):
        return tuple(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
