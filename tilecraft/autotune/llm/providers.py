"""Chat providers for the LLM-guided searches: any OpenAI-compatible endpoint (OpenAI,
vLLM, Ollama, llama.cpp's server, LM Studio) through the official `openai` SDK, and
Anthropic through the official `anthropic` SDK (`pip install tilecraft[llm]`).

Example::

    provider, reason = load_provider(Settings())  # TILECRAFT_LLM_PROVIDER=openai, ...
    if provider is None:
        print("no model:", reason)
    else:
        reply = provider.propose("Propose configs ...", system="You tune GPU kernels.")

API keys come from each SDK's usual variable (OPENAI_API_KEY, ANTHROPIC_API_KEY); a
local OpenAI-compatible server with no key gets a placeholder key.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from tilecraft.runtime.settings import Settings

MAX_RETRIES = 2  # the SDKs retry 429s, 5xx and dropped connections with backoff
LOCAL_KEY = "not-needed"  # OpenAI-compatible local servers accept any key


class ProviderError(Exception):
    """A request that gave no reply: unreachable, timed out, rate limited, refused, empty."""


class Provider(Protocol):
    """Something that answers one prompt with one reply (text expected to hold JSON)."""

    name: str
    model: str

    def propose(self, prompt: str, system: str) -> str: ...


class OpenAIProvider:
    """Chat completions in JSON mode, from OpenAI or any server that speaks its protocol."""

    name = "openai"

    def __init__(self, settings: Settings, model: str) -> None:
        import openai

        key = os.environ.get("OPENAI_API_KEY") or (LOCAL_KEY if settings.llm_base_url else None)
        self.model, self.max_tokens = model, settings.llm_max_tokens
        self.errors = (openai.OpenAIError,)
        self.client = openai.OpenAI(
            api_key=key,
            base_url=settings.llm_base_url,
            timeout=settings.llm_timeout_s,
            max_retries=MAX_RETRIES,
        )

    def propose(self, prompt: str, system: str) -> str:
        messages: Any = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompt},
        ]
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                max_tokens=self.max_tokens,
                response_format={"type": "json_object"},
            )
        except self.errors as e:
            raise ProviderError(_describe(e)) from e
        if not response.choices:
            raise ProviderError("the reply had no choices")
        message = response.choices[0].message
        if getattr(message, "refusal", None):
            raise ProviderError(f"the model refused: {message.refusal}")
        return _nonempty(message.content)


class AnthropicProvider:
    """Anthropic's messages API."""

    name = "anthropic"

    def __init__(self, settings: Settings, model: str) -> None:
        import anthropic

        self.model, self.max_tokens = model, settings.llm_max_tokens
        self.errors = (anthropic.AnthropicError,)
        self.client = anthropic.Anthropic(
            base_url=settings.llm_base_url,
            timeout=settings.llm_timeout_s,
            max_retries=MAX_RETRIES,
        )

    def propose(self, prompt: str, system: str) -> str:
        try:
            response = self.client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt}],
            )
        except self.errors as e:
            raise ProviderError(_describe(e)) from e
        if response.stop_reason == "refusal":
            raise ProviderError("the model refused")
        text = "".join(getattr(block, "text", "") for block in response.content)
        return _nonempty(text)


PROVIDERS: dict[str, type[OpenAIProvider] | type[AnthropicProvider]] = {
    "openai": OpenAIProvider,
    "anthropic": AnthropicProvider,
}


def load_provider(settings: Settings) -> tuple[Provider | None, str]:
    """The configured provider and "", or None and why there is none."""
    name = (settings.llm_provider or "").lower()
    if not name:
        return None, "no model configured (set TILECRAFT_LLM_PROVIDER and TILECRAFT_LLM_MODEL)"
    if name not in PROVIDERS:
        return None, f"unknown TILECRAFT_LLM_PROVIDER {name!r}; use one of {', '.join(PROVIDERS)}"
    if not settings.llm_model:
        return None, "TILECRAFT_LLM_MODEL is not set"
    try:
        return PROVIDERS[name](settings, settings.llm_model), ""
    except ImportError:
        return None, f"the {name!r} SDK is not installed (pip install 'tilecraft[llm]')"
    except Exception as e:  # e.g. the SDK refusing to start without an API key
        return None, f"{name} client: {_describe(e)}"


def make_provider(settings: Settings) -> Provider | None:
    """The configured provider, or None (see `load_provider` for the reason)."""
    return load_provider(settings)[0]


def _nonempty(text: str | None) -> str:
    if not text or not text.strip():
        raise ProviderError("the reply was empty")
    return text


def _describe(error: BaseException) -> str:
    """A one-line reason: the error's type, and its HTTP status where it has one."""
    status = getattr(error, "status_code", None)
    head = f"{type(error).__name__}" + (f" (HTTP {status})" if status else "")
    return f"{head}: {str(error).splitlines()[0][:200] if str(error) else ''}".rstrip(": ")
