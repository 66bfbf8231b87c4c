"""The `specroll` command line: one sub-command per module in `specroll.commands`.

Each command module defines `register(parser)`, which adds the command's arguments and sets
`func(args) -> int`. Only the module of the command being run is imported, so a command that needs
no model (`simulate`, `models list`) starts without loading torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = {
    "rollout": "run a rollout and write JSONL",
    "bench": "compare systems on one workload",
    "train": "GRPO training whose rollouts run on the specroll engine",
    "drafteval": "replay recorded rollouts through a drafter",
    "profile": "measure forward latency and fit the cost model",
    "simulate": "simulate a rollout step at cluster scale",
    "models": "list known models, pull one into the cache",
    "head": "train a draft head for a checkpoint",
    "serve": "serve the engine over vLLM's HTTP protocol (OpenAI, SkyRL, SGLang, AReaL)",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command is listed; only `command`'s module is imported, to add its arguments."""
    parser = argparse.ArgumentParser(prog="specroll", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, summary in COMMANDS.items():
        sub = subparsers.add_parser(name, help=summary, description=summary)
        if name == command:
            importlib.import_module(f"specroll.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    args.argv = list(argv)  # what was given, for a command that must tell a given flag from a default
    if not sys.stderr.isatty():  # libraries' redrawn bars (tqdm) garble a log: our lines say progress
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars follow this
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"specroll {command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
