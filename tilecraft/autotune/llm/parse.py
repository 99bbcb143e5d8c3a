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
MAX_PASSES = 4
_TOKEN = re.compile(r'[\[\]{}"]')
_OPENER = re.compile(r"[\[{]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOTHING = object()


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
    fenced = [part.removeprefix("json") for part in text.split("```")[1::2]]
    for candidate in (text, *fenced):
        found = _loads(candidate.strip())
        if found is not _NOTHING:
            return found
    start = 0
    for _ in range(MAX_PASSES):  # a stray bracket in prose hides what follows: skip it
        for begin, end in _spans(text, start):
            found = _loads(text[begin:end])
            if found is not _NOTHING:
                return found
        opener = _OPENER.search(text, start)
        if opener is None:
            return None
        start = opener.end()
    return None


def _loads(text: str) -> Any:
    """The JSON value of `text`, or _NOTHING (also for nesting deeper than MAX_DEPTH)."""
    if text[:1] in ("[", "{") and next(_spans(text, 0), None) != (0, len(text)):
        return _NOTHING
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOTHING


def _spans(text: str, start: int) -> Iterator[tuple[int, int]]:
    """(begin, end) of each balanced bracket group at top level from `start`, in order,
    skipping those nested deeper than MAX_DEPTH; stops at one that never closes."""
    depth, begin, deep, pos = 0, 0, False, start
    while (token := _TOKEN.search(text, pos)) is not None:
        char, pos = token.group(), token.end()
        if char == '"':
            if depth:  # inside JSON, brackets within strings do not count
                string = _STRING.match(text, token.start())
                if string is None:
                    return
                pos = string.end()
        elif char in "[{":
            begin, deep = (token.start(), False) if depth == 0 else (begin, deep)
            depth += 1
            deep = deep or depth > MAX_DEPTH
        elif depth:
            depth -= 1
            if depth == 0 and not deep:
                yield begin, pos


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
    if not space.is_valid(config):
        reasons.append(f"{where}: exceeds the hardware limits of the space, dropped")
        return None
    return config


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
