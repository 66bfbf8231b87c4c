"""The `specroll` command line: one sub-command per module in `specroll.commands`.

Each command module defines `register(subparsers)`, which adds its parser and sets `func(args) -> int`.
Modules are imported only when listed here, so a command's heavy imports load only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("rollout", "bench", "train", "drafteval", "profile", "simulate", "models")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specroll", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"specroll.commands.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"specroll.commands.{name}":
                raise
            continue  # command not built yet
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        print(f"specroll {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
