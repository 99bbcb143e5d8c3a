"""Protocol test doubles (not real models): HTTP servers on 127.0.0.1 that speak the
OpenAI chat completions endpoint (POST /v1/chat/completions) and the Anthropic messages
endpoint (POST /v1/messages), answering each request from a script."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    """One scripted answer: reply text with HTTP 200, or an error `status`, after `delay`
    seconds."""

    text: str = ""
    status: int = 200
    delay: float = 0.0


class ScriptedChatServer:
    """A protocol test double: answers requests in order from `script` (the last entry
    repeats) and records every request body in `requests`."""

    def __init__(self, script: list[Canned | str]) -> None:
        self.script = [c if isinstance(c, Canned) else Canned(c) for c in script]
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def next(self, path: str, body: dict[str, Any]) -> Canned:
        with self.lock:
            self.paths.append(path)
            self.requests.append(body)
            return self.script[min(len(self.requests), len(self.script)) - 1]

    def __enter__(self) -> ScriptedChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def openai_body(text: str, model: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": text, "refusal": None}
    return {
        "id": "chatcmpl-double",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def anthropic_body(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "msg_double",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _handler(double: ScriptedChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server spelling)
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            canned = double.next(self.path, body)
            time.sleep(canned.delay)
            if canned.status != 200:
                error = {"type": "error", "error": {"type": "api_error", "message": "scripted"}}
                return self.send(canned.status, error)
            make = anthropic_body if self.path.endswith("/messages") else openai_body
            self.send(200, make(canned.text, body.get("model", "double")))

        def send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("retry-after-ms", "1")  # keep the SDKs' backoff short
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
