"""LLM-guided searches against protocol test doubles (tests/llm_doubles.py): replies good
and bad, failures and fallback, the reply cache, and what the prompt shows."""

from __future__ import annotations

import json
import socket
import warnings
from pathlib import Path

import pytest
from landscapes import Landscape
from llm_doubles import Canned, ScriptedChatServer

from tilecraft.autotune.llm import LLMContext, LLMWarning, render_prompt
from tilecraft.autotune.llm.parse import parse_reply
from tilecraft.autotune.search import make_search
from tilecraft.autotune.trial import Trial
from tilecraft.runtime.settings import Settings

# Near the synthetic landscape's optimum (tests/landscapes.py), then nearer: each improves.
NEAR = {
    "block_sizes[0]": 128,
    "block_sizes[1]": 64,
    "reduction_loops[0]": 2048,
    "pid_type": "persistent_blocked",
    "indexing[0]": "tensor_descriptor",
    "num_warps": 4,
}
GOOD = {"configs": [{"num_warps": 2, "num_stages": 4}, NEAR]}
BETTER = {"configs": [{**NEAR, "range_num_stages[0]": 2, "range_unroll_factors[0]": 2}]}


def settings(tmp_path: Path, url: str, provider: str = "openai", **kw: object) -> Settings:
    base = f"{url}/v1" if provider == "openai" else url
    values = {"llm_timeout_s": 5.0, "llm_max_rounds": 3, **kw}
    return Settings(
        llm_provider=provider, llm_model="double", llm_base_url=base, cache_dir=tmp_path, **values
    )  # type: ignore[arg-type]


def run(name: str, s: Settings, max_configs: int = 30) -> tuple[object, Landscape]:
    land = Landscape(seed=1)
    search = make_search(
        name, land.space, land, land.budget(max_configs), context=LLMContext(settings=s)
    )
    search.run()
    return search, land


def configs_of(land: Landscape, proposal: dict) -> object:
    return land.space.snap(proposal)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_valid_proposals_are_benchmarked(
    tmp_path: Path, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    script = [json.dumps(GOOD), json.dumps(BETTER), "{}"]
    with ScriptedChatServer(script) as server, warnings.catch_warnings():
        warnings.simplefilter("error", LLMWarning)
        search, land = run("llm", settings(tmp_path, server.url, provider))
    measured = [t.config for t in search.trials]
    for proposal in GOOD["configs"] + BETTER["configs"]:
        assert configs_of(land, proposal) in measured
    path = "/v1/messages" if provider == "anthropic" else "/v1/chat/completions"
    assert server.paths[0] == path and len(server.requests) >= 2
    if provider == "openai":
        assert server.requests[0]["response_format"] == {"type": "json_object"}
    assert search.fallback is None and len(server.requests) == 3  # "{}": nothing new, stop


def test_json_inside_prose_and_fences(tmp_path: Path) -> None:
    reply = f"Sure! Here are my picks:\n```json\n{json.dumps(GOOD)}\n```\nGood luck."
    with ScriptedChatServer([reply]) as server:
        search, land = run("llm", settings(tmp_path, server.url, llm_max_rounds=1))
    assert configs_of(land, GOOD["configs"][0]) in [t.config for t in search.trials]
    bare = 'I suggest {"configs": [{"num_warps": 2}]} as a start.'
    assert len(parse_reply(bare, land.space)[0]) == 1


def test_invalid_values_snapped_and_unknown_knobs_dropped() -> None:
    space = Landscape().space
    reply = {"configs": [{"num_warps": 7, "block_sizes[0]": "64", "colour": "red"}, [1]]}
    configs, reasons = parse_reply(json.dumps(reply), space)
    assert space.values(configs[0])["num_warps"] == 8  # nearest valid value
    assert space.values(configs[0])["block_sizes[0]"] == 64
    assert any("unknown knob 'colour'" in r for r in reasons)
    assert any("snapped" in r for r in reasons) and any("not a JSON object" in r for r in reasons)


def test_duplicates_dropped() -> None:
    space = Landscape().space
    same = {"num_warps": 2}
    reply = json.dumps({"configs": [same, same, {}, {"num_stages": 2}]})
    configs, reasons = parse_reply(reply, space, measured={space.default()})
    assert configs == [space.snap(same), space.snap({"num_stages": 2})]
    assert sum("duplicate" in r for r in reasons) == 2


@pytest.mark.parametrize("text", ["", "not json {oops", '{"configs": []}', '{"configs": 3}'])
def test_unusable_reply_falls_back(tmp_path: Path, text: str) -> None:
    assert parse_reply(text or "   ", Landscape().space)[0] == []
    with ScriptedChatServer([text]) as server, pytest.warns(LLMWarning) as caught:
        search, land = run("llm", settings(tmp_path, server.url), max_configs=25)
    assert len(caught) == 1
    assert len(search.trials) == 25  # the classifier search used the rest of the budget
    assert sum(n for _, n in land.batches) == 25  # every measured trial is kept


def _assert_fell_back(search: object, land: Landscape, max_configs: int, caught: list) -> None:
    assert len([w for w in caught if issubclass(w.category, LLMWarning)]) == 1
    assert search.fallback  # type: ignore[attr-defined]
    assert len(search.trials) == max_configs == sum(n for _, n in land.batches)  # type: ignore[attr-defined]


@pytest.mark.parametrize("status", [429, 500])
def test_error_status_after_retries_falls_back(tmp_path: Path, status: int) -> None:
    with (
        ScriptedChatServer([Canned(status=status)]) as server,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        search, land = run("llm", settings(tmp_path, server.url), max_configs=20)
    assert len(server.requests) == 3  # the first try and two retries
    assert f"HTTP {status}" in search.fallback
    _assert_fell_back(search, land, 20, caught)


def test_rate_limit_then_success_is_retried(tmp_path: Path) -> None:
    with ScriptedChatServer([Canned(status=429), json.dumps(GOOD), "{}"]) as server:
        search, land = run("llm", settings(tmp_path, server.url, llm_max_rounds=1))
    assert configs_of(land, GOOD["configs"][0]) in [t.config for t in search.trials]


def test_slow_reply_past_timeout_falls_back(tmp_path: Path) -> None:
    s = settings(tmp_path, "", llm_timeout_s=0.2)
    with ScriptedChatServer([Canned(json.dumps(GOOD), delay=1.0)]) as server:
        s.llm_base_url = f"{server.url}/v1"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            search, land = run("llm", s, max_configs=20)
    assert "Timeout" in search.fallback
    _assert_fell_back(search, land, 20, caught)


def test_server_gone_falls_back_without_losing_trials(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search, land = run("llm", settings(tmp_path, f"http://127.0.0.1:{port}"), max_configs=20)
    assert "Connection" in search.fallback
    _assert_fell_back(search, land, 20, caught)


def test_no_provider_configured_tunes_anyway(tmp_path: Path) -> None:
    s = Settings(llm_provider=None, cache_dir=tmp_path)
    with pytest.warns(LLMWarning, match="TILECRAFT_LLM_PROVIDER"):
        search, _ = run("llm", s, max_configs=15)
    assert len(search.trials) == 15


def test_reply_cache_makes_reruns_free(tmp_path: Path) -> None:
    with ScriptedChatServer([json.dumps(GOOD), json.dumps(BETTER), "{}"]) as server:
        first, _ = run("llm", settings(tmp_path, server.url))
        sent = len(server.requests)
        second, _ = run("llm", settings(tmp_path, server.url))
    assert sent >= 1 and len(server.requests) == sent and second.requests == 0
    assert [t.config for t in first.trials] == [t.config for t in second.trials]
    assert list((tmp_path / "llm").glob("*.json"))


def test_hybrid_asks_once_then_uses_the_classifier(tmp_path: Path) -> None:
    with ScriptedChatServer([json.dumps(GOOD)]) as server:
        search, land = run("llm-hybrid", settings(tmp_path, server.url), max_configs=40)
    assert len(server.requests) == 1 and search.fallback is None
    assert len(search.trials) == 40
    assert configs_of(land, GOOD["configs"][1]) in [t.config for t in search.trials]


def test_prompt_shows_what_the_model_needs() -> None:
    import softmax

    bound = softmax.softmax.bind(softmax.inputs(shape=(8, 64), device="cpu"))
    good = bound.default_config
    trials = [Trial(good, "ok", 0.125), Trial(good, "compile_error", error="out of registers")]
    entry = (good, 0.5, "float32[16, 64]")
    prompt = render_prompt(bound, trials, [entry])
    for needed in (
        "def softmax(x: torch.Tensor)",  # source
        "1 load, 1 store, 2 reduce, 0 dot",  # IR summary
        "grid over tile block 0",  # loop nest
        "float32[8, 64]",  # argument shapes
        "block_sizes[0]: [1, 2, 4, 8]; default 8",  # knobs, values, default
        "default config:",
        "CPU (Triton interpreter)",  # hardware
        "0.125 ms",  # results
        "compile_error: out of registers",  # failures with reasons
        "float32[16, 64]: 0.5 ms",  # database entries
        '{"configs": [',  # reply format
    ):
        assert needed in prompt, needed


def test_leaders_are_retimed_before_each_prompt(tmp_path: Path) -> None:
    asked: list[list] = []

    def retime(configs: list) -> dict:
        asked.append(configs)
        return {c: 1.0 + i for i, c in enumerate(configs)}

    land = Landscape(seed=1)
    script = [json.dumps(GOOD), json.dumps(BETTER), "{}"]
    with ScriptedChatServer(script) as server:
        context = LLMContext(settings=settings(tmp_path, server.url), retime=retime)
        search = make_search("llm", land.space, land, land.budget(30), context=context)
        search.run()
    assert asked and all(len(group) == 3 for group in asked)  # round 0 has no leaders yet
    assert 1.0 in [t.time_ms for t in search.trials]  # the re-timed value replaced the old
