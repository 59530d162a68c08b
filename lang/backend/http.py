"""A small JSON-over-HTTP client on the standard library (GET, POST, server-sent events)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lang.errors import AuthenticationError, BackendError

logger = logging.getLogger(__name__)


@dataclass
class HttpClient:
    """Talks to one base URL, with an optional bearer API key."""

    base_url: str
    api_key: str | None = None
    timeout: float = 600.0

    def get(self, path: str) -> Any:
        """GET `path`: its JSON answer decoded (a plain-text answer as a string)."""
        with self._open(path, None) as response:
            return _decode(response.read())

    def post(self, path: str, body: Any) -> Any:
        """POST a JSON body to `path`: the JSON answer decoded (plain text as a string)."""
        with self._open(path, body) as response:
            return _decode(response.read())

    def stream(self, path: str, body: Any) -> Iterator[Any]:
        """POST a JSON body and yield each `data:` event's JSON until `[DONE]`."""
        with self._open(path, body) as response:
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    return
                yield json.loads(payload)

    def _open(self, path: str, body: Any):
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url.rstrip("/") + path, data, headers)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            if e.code == 401:
                raise AuthenticationError(_error_message(e)) from None
            raise BackendError(_error_message(e), e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise BackendError(f"cannot reach {self.base_url}{path}: {e}") from None


def _decode(raw: bytes) -> Any:
    text = raw.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _error_message(error: urllib.error.HTTPError) -> str:
    """The server's `error.message` when it sent one, else the raw body."""
    body = error.read().decode("utf-8", "replace")
    try:
        detail = json.loads(body)
    except ValueError:
        return body or str(error.reason)
    if isinstance(detail, dict) and isinstance(detail.get("error"), dict):
        return str(detail["error"].get("message", body))
    return body
