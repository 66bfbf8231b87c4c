"""The one error the server answers with: OpenAI's shape naming the field at fault, with vLLM's `code`
(the HTTP status, an integer)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the server refuses: `status` (4xx) and the `{"error": {...}}` body."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, type: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.type = message, param, status, type

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}
        }
