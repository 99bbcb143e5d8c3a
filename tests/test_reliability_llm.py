"""Reliability suite, part 2: the LLM-guided search against hostile servers on
127.0.0.1 (trickling, hanging, huge or pathological replies) and failing providers."""

from __future__ import annotations

import json
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from landscapes import Landscape
from llm_doubles import ScriptedChatServer

from tilecraft.autotune.llm import LLMContext, LLMWarning
from tilecraft.autotune.llm.parse import MAX_REPLY_CHARS, extract_json
from tilecraft.autotune.search import make_search
from tilecraft.autotune.trial import Budget
from tilecraft.runtime.settings import Settings

pytest.importorskip("openai")  # imported up front: the deadlines time requests, not imports


def settings(tmp_path: Path, url: str, **kw: object) -> Settings:
    values = {"llm_timeout_s": 5.0, "llm_max_rounds": 2, **kw}
    return Settings(
        llm_provider="openai",
        llm_model="double",
        llm_base_url=f"{url}/v1",
        cache_dir=tmp_path,
        **values,  # type: ignore[arg-type]
    )


def run(s: Settings, budget: Budget | None = None, provider: object = None) -> object:
    land = Landscape(seed=1)
    context = LLMContext(settings=s, provider=provider)  # type: ignore[arg-type]
    search = make_search("llm", land.space, land, budget or land.budget(20), context=context)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.run()
    assert any(issubclass(w.category, LLMWarning) for w in caught)  # it said why, once
    assert len(search.trials) == 20 or budget is not None  # and tuned on without the model
    return search


@contextmanager
def raw_server(respond: object) -> Iterator[str]:
    """A TCP server on 127.0.0.1 whose every connection is handled by `respond(conn)`."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            threading.Thread(target=respond, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        sock.close()


def trickle(conn: socket.socket, stop: threading.Event) -> None:
    """Answer with headers, then one byte of body every 0.1 s (each read stays alive)."""
    conn.recv(65536)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    with conn:
        conn.sendall(head)
        while not stop.is_set():
            try:
                conn.sendall(b" ")
            except OSError:
                return
            time.sleep(0.1)


def hang(conn: socket.socket, stop: threading.Event) -> None:
    """Accept the request and never answer."""
    with conn:
        conn.recv(65536)
        stop.wait(30)


def test_trickling_server_is_cut_at_the_request_deadline(tmp_path: Path) -> None:
    with raw_server(trickle) as url:
        start = time.monotonic()
        search = run(settings(tmp_path, url, llm_timeout_s=1.0))
        took = time.monotonic() - start
    assert "within 1.0 s" in search.fallback and took < 8.0  # the body would take hours


def test_hanging_server_is_bounded_by_the_tuning_budget(tmp_path: Path) -> None:
    land = Landscape(seed=1)
    with raw_server(hang) as url:
        start = time.monotonic()
        budget = Budget(max_configs=10_000, max_seconds=1.5)  # wall clock
        s = settings(tmp_path, url, llm_timeout_s=60.0)
        context = LLMContext(settings=s)
        search = make_search("llm", land.space, land, budget, context=context)
        with pytest.warns(LLMWarning, match="within"):
            search.run()
        took = time.monotonic() - start
    assert took < 8.0  # llm_timeout_s alone would allow 60 s


def test_reply_of_a_thousand_brackets_falls_back_and_is_not_cached(tmp_path: Path) -> None:
    with ScriptedChatServer(["[" * 1000]) as server:
        first = run(settings(tmp_path, server.url))
    assert "no usable" in first.fallback
    assert not list((tmp_path / "llm").glob("*.json"))
    with raw_server(hang) as url:  # the rerun asks again, and is not stuck on a bad cache
        again = run(settings(tmp_path, url, llm_timeout_s=0.5))
    assert again.requests == 1 and "within" in again.fallback


def test_reply_over_the_size_cap_falls_back(tmp_path: Path) -> None:
    huge = '{"configs": [' + '{"num_warps": 4},' * (MAX_REPLY_CHARS // 16) + "{}]}"
    with ScriptedChatServer([huge]) as server:
        search = run(settings(tmp_path, server.url))
    assert "at most" in search.fallback


def test_unclosed_json_is_parsed_in_linear_time() -> None:
    # a quadratic search took 69 s on 1.8 MB; one pass takes well under a second even on
    # a loaded machine (the bound is loose so that a busy CI never fails it)
    for text in ("{" * (MAX_REPLY_CHARS - 1), '{"a": [' * 30_000, "[" * 2_000_000, '["' * 99_999):
        start = time.monotonic()
        assert extract_json(text) is None
        assert time.monotonic() - start < 3.0
    nested = "[" * 500 + "]" * 500  # valid, but deeper than any reply of configs
    assert extract_json(nested) is None
    assert extract_json('x [1 {"configs": []} y') == {"configs": []}


class Broken:
    """A provider whose every request fails with an unexpected exception."""

    name, model = "broken", "none"

    def __init__(self, error: BaseException | None = None, reply: object = None) -> None:
        self.error, self.reply = error, reply

    def propose(self, prompt: str, system: str) -> object:
        if self.error is not None:
            raise self.error
        return self.reply


@pytest.mark.parametrize(
    "provider",
    [Broken(KeyError("choices")), Broken(RecursionError()), Broken(reply=42)],
    ids=["key_error", "recursion_error", "not_text"],
)
def test_provider_exception_falls_back(tmp_path: Path, provider: Broken) -> None:
    search = run(Settings(cache_dir=tmp_path), provider=provider)
    assert search.fallback


def test_reply_the_parser_chokes_on_falls_back(tmp_path: Path) -> None:
    deep = '{"configs": [{"num_warps": ' + "[" * 15 + "]" * 15 + "}]}"
    search = run(Settings(cache_dir=tmp_path), provider=Broken(reply=deep))
    assert search.fallback and json.loads(deep)
