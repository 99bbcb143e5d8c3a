"""LLM-guided autotuning: a language model shown the kernel, the hardware and the results
so far proposes configs ("llm" and "llm-hybrid" searches).

Pick it with `TILECRAFT_AUTOTUNE_SEARCH=llm` (or `kernel.autotune(args, search="llm")`)
and a model with `TILECRAFT_LLM_PROVIDER` and `TILECRAFT_LLM_MODEL` (and
`TILECRAFT_LLM_BASE_URL` for a local OpenAI-compatible server). `render_prompt(bound)`
shows what would be sent.
"""

from __future__ import annotations

# The search registry imports llm.search; importing it first keeps that order whichever
# package a user imports first (llm.search needs the search package's submodules).
import tilecraft.autotune.search  # noqa: F401
from tilecraft.autotune.llm.context import LLMContext, closest_entries
from tilecraft.autotune.llm.prompt import SYSTEM, build_prompt, render_prompt
from tilecraft.autotune.llm.providers import Provider, ProviderError, load_provider, make_provider
from tilecraft.autotune.llm.search import HybridSearch, LLMSearch, LLMWarning

__all__ = [
    "SYSTEM",
    "HybridSearch",
    "LLMContext",
    "LLMSearch",
    "LLMWarning",
    "Provider",
    "ProviderError",
    "build_prompt",
    "closest_entries",
    "load_provider",
    "make_provider",
    "render_prompt",
]
