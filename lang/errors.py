"""Exception types of the DSL; each names what went wrong in terms a user can act on."""

from __future__ import annotations


class LangError(Exception):
    """Base class of every error the DSL raises on its own."""


class BackendError(LangError):
    """A backend answered with an error (HTTP status and the server's message) or not at all."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message if status is None else f"HTTP {status}: {message}")
        self.status = status


class AuthenticationError(BackendError):
    """The server refused the API key (HTTP 401): none was given, or a wrong one."""

    def __init__(self, message: str):
        super().__init__(
            f"authentication failed ({message}); pass the server's --api-key as api_key=", 401
        )


class UnsupportedFeatureError(LangError):
    """The chosen backend cannot do a feature the program asks for (e.g. regex on a chat API)."""

    def __init__(self, feature: str, backend: str, hint: str = ""):
        message = f"{feature} is not supported by the {backend} backend"
        super().__init__(message + (f": {hint}" if hint else ""))
        self.feature = feature
        self.backend = backend
