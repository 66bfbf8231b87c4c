"""The one error the server answers with: OpenAI's shape, naming the field at fault."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the server refuses: `status` (4xx) and OpenAI's `{"error": {...}}` body."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = message, param, status, type, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
