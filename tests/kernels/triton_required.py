"""The Triton kernels' tests need Triton (the `gpu` extra, which `make test` installs): under CI its
absence fails them rather than skipping them."""

from __future__ import annotations

import os

import pytest


def require_triton() -> None:
    try:
        import triton  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("Triton is not installed (pip install 'specroll[gpu]')")
