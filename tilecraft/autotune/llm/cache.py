"""Replies of the model kept on disk by the SHA-256 of what was asked, so a rerun of a
tuning session is reproducible and costs no tokens."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tilecraft.exc import TilecraftError
from tilecraft.runtime.cache import private_dir, write_private


class ReplyCache:
    """Reply text by (provider, model, system, prompt), one JSON file each under `root`."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, provider: str, model: str, system: str, prompt: str) -> Path:
        text = json.dumps([provider, model, system, prompt])
        return self.root / f"{hashlib.sha256(text.encode()).hexdigest()}.json"

    def get(self, provider: str, model: str, system: str, prompt: str) -> str | None:
        """The cached reply, or None (a missing or unreadable entry counts as a miss)."""
        try:
            entry = json.loads(self.path(provider, model, system, prompt).read_text())
        except (OSError, ValueError):
            return None
        reply = entry.get("reply") if isinstance(entry, dict) else None
        return reply if isinstance(reply, str) else None

    def put(self, provider: str, model: str, system: str, prompt: str, reply: str) -> None:
        """Store a reply; a cache that cannot be written is skipped, not an error."""
        path = self.path(provider, model, system, prompt)
        entry = {"provider": provider, "model": model, "reply": reply}
        try:
            private_dir(path.parent)
            write_private(path, json.dumps(entry))  # atomic: readers never see half of one
        except (OSError, TilecraftError):
            pass
