"""`specroll serve`: a vLLM-compatible rollout server on one specroll engine (`specroll.serve`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specroll.commands.rollout import add_engine_arguments, engine_spec_from_args

API_KEY_ENV = "SPECROLL_API_KEY"


def register(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser)
    parser.add_argument("--speculate", default="on", help="off | on (default drafter) | a drafter's name")
    parser.add_argument("--host", default="127.0.0.1", help="where to listen (non-loopback needs --api-key)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"bearer key for every endpoint but /health (default: ${API_KEY_ENV})",
    )
    parser.add_argument(
        "--served-model-name", default=None, help="the model name responses give (default: --model's name)"
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=4096,
        help="prompt + output positions of one choice (capped by the model's); sizes the cache",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=4096, help="the most new tokens one choice may ask for"
    )
    parser.add_argument(
        "--kv-memory",
        default=None,
        help="the KV cache's budget: GiB (8, 8GiB), MiB (512MiB) or a share of free memory (0.4, 40%%); "
        "the slots (requests at once) and, where one slot does not fit, the context follow from it "
        "(default: the slots of --max-batch-size that fit half the free memory)",
    )
    parser.add_argument("--max-n", type=int, default=64, help="the most choices one prompt may ask for")
    parser.add_argument("--max-body-mb", type=float, default=8.0, help="the largest request body")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _check_extra()
    from specroll.engine.memory import KvMemory
    from specroll.serve.launch import check_exposure, serve
    from specroll.serve.state import ServeOptions

    check_exposure(args.host, args.api_key)
    for name in ("max_model_len", "max_tokens", "max_n", "port"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    spec = engine_spec_from_args(args, max_tokens=args.max_model_len)
    name = args.served_model_name or Path(str(args.model)).name
    options = ServeOptions(
        model_name=name,
        model_aliases=frozenset({str(args.model), str(spec.model_dir), name, "default"}),
        api_key=args.api_key,
        max_model_len=args.max_model_len,
        max_tokens=args.max_tokens,
        max_n=args.max_n,
        max_body_bytes=int(args.max_body_mb * (1 << 20)),
        kv_memory=None if args.kv_memory is None else KvMemory.parse(args.kv_memory),
    )
    return serve(spec, options, args.host, args.port)


def _check_extra() -> None:
    """The HTTP server comes with the `serve` extra; say so instead of an import's traceback."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        missing = getattr(err, "name", None) or "fastapi/uvicorn"
        raise ValueError(
            f"`specroll serve` needs the `serve` extra ({missing} is not installed): "
            "pip install 'specroll[serve]'"
        ) from None
