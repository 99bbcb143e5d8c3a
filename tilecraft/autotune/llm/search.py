"""LLM-guided searches: a model shown the kernel, the hardware and the results so far
proposes configs in a few rounds ("llm"), or one round that seeds the classifier-guided
search ("llm-hybrid"). Without a usable model they say why once and tune on with the
classifier-guided search, keeping every trial measured so far.

Example::

    context = LLMContext(bound, Settings(llm_provider="openai", llm_model="gpt-4o"))
    search = make_search("llm", space, evaluate, Budget(max_configs=60), context=context)
    best = search.run()
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tilecraft.autotune.llm.cache import ReplyCache
from tilecraft.autotune.llm.context import LLMContext
from tilecraft.autotune.llm.parse import MAX_REPLY_CHARS, extract_json, found_configs
from tilecraft.autotune.llm.prompt import SYSTEM, build_prompt
from tilecraft.autotune.llm.providers import Provider, ProviderError, load_provider
from tilecraft.autotune.search.classifier import ClassifierPatternSearch
from tilecraft.autotune.search.common import cost
from tilecraft.autotune.space import ConfigSpace
from tilecraft.autotune.trial import Budget, Evaluate
from tilecraft.runtime.cache import subdir
from tilecraft.runtime.config import Config

log = logging.getLogger(__name__)


class LLMWarning(UserWarning):
    """An LLM-guided search tuned without the model (the message says why)."""


class NoModel(Exception):
    """The model cannot help any further: no provider, a failed request, nothing usable."""


T = TypeVar("T")


def within(seconds: float, call: Callable[[], T]) -> T:
    """`call()`, or NoModel once `seconds` pass: a server that trickles bytes keeps each
    read alive, so only a wall-clock deadline bounds a request. The abandoned request
    finishes (or not) in a daemon thread that never delays the exit."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            outcome["error"] = e

    thread = threading.Thread(target=run, name="tilecraft-llm-request", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise NoModel(f"no complete reply within {seconds:.1f} s (Timeout)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class LLMSearch(ClassifierPatternSearch):
    """Round 0 measures the default, the seeds and `random_starts` random configs while
    the first request is in flight; each later round shows the model the updated
    results and measures its valid proposals. Stops when a round does not improve the
    best (a reply with nothing new counts as such), after `settings.llm_max_rounds`
    requests, or at the budget. Without a model, or when its first reply holds nothing
    usable, it says why once and continues as the classifier-guided search.
    """

    name = "llm"
    options = ("context",)  # the extra constructor arguments `make_search` passes on
    random_starts = 4

    def __init__(
        self,
        space: ConfigSpace,
        evaluate: Evaluate,
        budget: Budget,
        seed: int = 0,
        seeds: list[Config] | None = None,
        context: LLMContext | None = None,
    ) -> None:
        super().__init__(space, evaluate, budget, seed=seed, seeds=seeds)
        self.context = context or LLMContext()
        settings = self.context.settings
        self.cache = ReplyCache(subdir(settings.cache_dir, "llm"))
        self.requests = 0  # requests actually sent (cache misses)
        self.reasons: list[str] = []  # why parts of replies were dropped or changed
        self.fallback: str | None = None  # why the search went on without the model

    def search(self) -> None:
        try:
            self.llm_rounds(self.context.settings.llm_max_rounds)
        except NoModel as e:
            self.fall_back(str(e))

    def llm_rounds(self, rounds: int) -> None:
        """Up to `rounds` requests, the first overlapping round 0's measurements."""
        provider = self.connect()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tilecraft-llm") as pool:
            pending = pool.submit(self.ask, provider, self.prompt())
            self.measure(self.starts(1 + len(self.seeds) + self.random_starts))
            configs = pending.result()
        for round_ in range(rounds):
            if round_ > 0:
                if self.done():
                    return
                configs = self.ask(provider, self.prompt())
            before = self.best_cost()
            if not configs and round_ == 0:
                raise NoModel("the model proposed no usable new config")
            self.measure(configs)  # nothing new to measure counts as no improvement
            if self.done() or not self.best_cost() < before:
                return

    def connect(self) -> Provider:
        if self.context.provider is not None:
            return self.context.provider
        provider, reason = load_provider(self.context.settings)
        if provider is None:
            raise NoModel(reason)
        return provider

    def prompt(self) -> str:
        self.retime_leaders()
        bound, entries = self.context.bound, self.context.db_entries
        return build_prompt(self.space, bound, self.trials, entries)

    def retime_leaders(self, n: int = 3) -> None:
        """Time the fastest few again, together, so noise does not mislead the model."""
        leaders = self.ranked()[:n]
        if self.context.retime is None or len(leaders) < 2:
            return
        times = self.context.retime([t.config for t in leaders])
        for trial in leaders:
            trial.time_ms = times.get(trial.config, trial.time_ms)

    def ask(self, provider: Provider, prompt: str) -> list[Config]:
        """The configs the model proposes for `prompt`: from the cache when this exact
        prompt was asked before, and a reply is cached only once its JSON parsed."""
        key = (provider.name, provider.model, SYSTEM, prompt)
        cached = self.cache.get(*key)
        found = None if cached is None else extract_json(cached)
        if found is None:
            found = extract_json(self.reply(provider, prompt))
            if found is None:
                return self.proposals(None)
            self.cache.put(*key, json.dumps(found))
        return self.proposals(found)

    def reply(self, provider: Provider, prompt: str) -> str:
        """The model's reply within the deadline (the request timeout, and what is left of
        the tuning budget), however slowly the server sends it; at most MAX_REPLY_CHARS."""
        deadline = self.deadline()
        if deadline <= 0:
            raise NoModel("the tuning budget is spent")
        self.requests += 1
        try:
            text = within(deadline, lambda: provider.propose(prompt, SYSTEM))
        except NoModel:
            raise
        except ProviderError as e:
            raise NoModel(str(e)) from e
        except Exception as e:  # a provider's bug must not cost the trials measured so far
            raise NoModel(f"{type(e).__name__}: {e}") from e
        if not isinstance(text, str) or len(text) > MAX_REPLY_CHARS:
            raise NoModel(f"the reply is not text of at most {MAX_REPLY_CHARS} characters")
        return text

    def deadline(self) -> float:
        """Seconds the next request may take."""
        limit = self.context.settings.llm_timeout_s
        budget = self.budget
        if budget.max_seconds is not None and budget.clock is time.monotonic:
            limit = min(limit, budget.max_seconds - budget.elapsed())
        return limit

    def proposals(self, found: Any) -> list[Config]:
        configs: list[Config] = []
        reasons = ["no JSON object found in the reply"]
        if found is not None:
            try:
                configs, reasons = found_configs(found, self.space, self.seen)
            except Exception as e:  # noqa: BLE001 - a reply must never stop the tuning
                raise NoModel(f"the reply could not be read ({type(e).__name__})") from e
        for reason in reasons:
            log.info("tilecraft llm: %s", reason)
        self.reasons += reasons
        return configs

    def best_cost(self) -> float:
        best = self.best()
        return cost(best) if best else math.inf

    def fall_back(self, reason: str) -> None:
        """Say why once, then spend the rest of the budget on the classifier search."""
        self.fallback = reason
        warnings.warn(
            f"tilecraft: the {self.name} search goes on without a model: {reason}; "
            "using the classifier-guided search",
            LLMWarning,
            stacklevel=2,
        )
        self.hand_over()

    def hand_over(self) -> None:
        """The classifier-guided climb, from every trial measured so far."""
        self.measure(self.starts(1 + len(self.seeds) + max(self.initial - len(self.trials), 0)))
        self.climb_on(list(self.trials))


class HybridSearch(LLMSearch):
    """One LLM round (overlapping round 0), then the classifier-guided search seeded
    with every result."""

    name = "llm-hybrid"

    def search(self) -> None:
        try:
            self.llm_rounds(1)
        except NoModel as e:
            self.fall_back(str(e))
            return
        self.hand_over()
