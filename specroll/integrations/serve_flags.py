"""A `LocalServer` (`specroll serve` without HTTP) from the flags `specroll serve` takes: the CLI's own
parser and its one way of turning flags into an engine, so an in-process host (verl's rollout actor)
gets the engine the command line would build. It sits here, above the server and the commands, so
that the server imports neither."""

from __future__ import annotations

from pathlib import Path

from specroll.cli import build_parser
from specroll.commands.rollout import engine_spec_from_args
from specroll.engine.memory import KvMemory
from specroll.serve.local import LocalServer
from specroll.serve.state import ServeOptions


def local_server_from_flags(flags: list[str]) -> LocalServer:
    """The server `specroll serve FLAGS` would run (its engine flags, `--max-model-len`,
    `--max-tokens`, `--max-n`, `--kv-memory`, `--served-model-name`); a bad flag is a ValueError."""
    try:
        args = build_parser("serve").parse_args(["serve", *flags])
    except SystemExit:  # argparse has printed why
        raise ValueError(f"not flags of `specroll serve`: {' '.join(flags)}") from None
    name = args.served_model_name or Path(str(args.model)).name
    options = ServeOptions(
        model_name=name,
        model_aliases=frozenset({name}),
        max_model_len=args.max_model_len,
        max_tokens=args.max_tokens,
        max_n=args.max_n,
        kv_memory=None if args.kv_memory is None else KvMemory.parse(args.kv_memory),
    )
    return LocalServer(engine_spec_from_args(args, max_tokens=args.max_model_len), options)
