"""`specroll drafteval`: replay recorded rollouts through a drafter and report acceptance lengths.

Reference protocol (Seer Table 2; the ArcticInference figures in the data README): `--max-draft 8`,
grouped mode over the first 20 groups in file order, history mode over the first 10 problems by
prompt_id (string order); these are the defaults of `--max-groups` and `--problem-order`. In history
mode a problem's response at each step after its first is a target; its context is the prompt and its
own tokens so far, its references the same problem's responses at the previous W steps.
"""

from __future__ import annotations

import argparse
import json
from typing import Callable

from specroll.drafteval.data import PROBLEM_ORDERS, load_groups, load_histories
from specroll.drafteval.protocols import TokenizedGroup, TokenizedHistory, evaluate_grouped, evaluate_history
from specroll.drafteval.replay import ReplayStats
from specroll.drafting.combined import CombinedDrafter
from specroll.drafting.grouped import GroupedDrafter
from specroll.drafting.history import HistoryDrafter
from specroll.drafting.own_context import OwnContextDrafter
from specroll.drafting.protocol import Drafter
from specroll.drafting.suffix_draft import DraftShape
from specroll.drafting.suffix_index import DEFAULT_MAX_DEPTH, DEFAULT_SHORT_MATCH_DISCOUNT
from specroll.engine_config import EngineConfig

DEFAULT_MAX_GROUPS = {"grouped": 20, "history": 10}


def register(p: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    p.description = __doc__
    p.add_argument("--data", required=True, help="JSONL of groups or of per-step responses")
    p.add_argument("--tokenizer", required=True, help="directory of HF tokenizer files")
    p.add_argument("--mode", choices=("grouped", "history"), default="grouped")
    p.add_argument("--refs", type=int, default=0, help="grouped: references per target (N)")
    p.add_argument("--window", type=int, default=0, help="history: training steps of history (W)")
    p.add_argument("--decay", type=float, default=0.5, help="history: weight ratio of a step to the next")
    p.add_argument(  # the engine's default, which is the reference protocol's 8
        "--max-draft",
        type=int,
        default=EngineConfig().max_draft,
        help="draft budget (tree depth) per forward",
    )
    p.add_argument("--tree", action="store_true", help="multi-path drafts")
    p.add_argument("--max-verify", type=int, default=16, help="tree: at most this many drafted tokens")
    p.add_argument("--min-prob", type=float, default=0.0, help="cut paths below this estimated probability")
    p.add_argument("--max-depth", type=int, default=DEFAULT_MAX_DEPTH, help="suffix index depth")
    p.add_argument(
        "--short-match-discount",
        type=float,
        default=DEFAULT_SHORT_MATCH_DISCOUNT,
        help="scores scale a continuation after a d-token match by d / (d + this); 0: none",
    )
    p.add_argument(
        "--drafter",
        choices=("combined", "own", "shared"),
        default="combined",
        help="own context, the group/history index alone, or both chosen by score",
    )
    p.add_argument(
        "--max-groups",
        type=int,
        default=None,
        help="groups (grouped) or problems (history) used as targets; default 20 / 10",
    )
    p.add_argument(
        "--problem-order",
        choices=PROBLEM_ORDERS,
        default="sorted",
        help="history: which problems come first, by prompt_id or in file order",
    )
    p.add_argument("--json", action="store_true", help="print one line of JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _validate(args)
    make_drafter = _drafter_factory(args)
    encode = _encoder(args.tokenizer)
    limit = args.max_groups if args.max_groups is not None else DEFAULT_MAX_GROUPS[args.mode]
    if args.mode == "grouped":
        groups = [_tokenize_group(g, encode) for g in load_groups(args.data)[:limit]]
        stats = evaluate_grouped(groups, make_drafter, args.refs, args.max_draft)
    else:
        problems = [
            _tokenize_history(h, encode) for h in load_histories(args.data, args.problem_order)[:limit]
        ]
        stats = evaluate_history(problems, make_drafter, args.max_draft)
    _print(stats, args)
    return 0


def _validate(args: argparse.Namespace) -> None:
    for name in ("refs", "window"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name} must be >= 0")
    if args.max_draft < 1 or args.max_verify < 1:
        raise ValueError("--max-draft and --max-verify must be >= 1")
    if args.drafter == "shared" and args.mode == "history" and args.window == 0:
        raise ValueError("--drafter shared needs --window >= 1 in history mode")


def _drafter_factory(args: argparse.Namespace) -> Callable[[], Drafter]:
    shape = DraftShape(
        min_prob=args.min_prob,
        max_tree_tokens=args.max_verify if args.tree else 0,
        short_match_discount=args.short_match_discount,
    )

    def make() -> Drafter:
        # the shared index comes first: on equal scores its richer statistics win the tie
        drafters: list[Drafter] = []
        if args.drafter != "own" and args.mode == "grouped":
            drafters.append(GroupedDrafter(shape, args.max_depth))
        if args.drafter != "own" and args.mode == "history" and args.window > 0:
            drafters.append(HistoryDrafter(args.window, args.decay, shape, args.max_depth))
        if args.drafter != "shared":
            drafters.append(OwnContextDrafter(shape, args.max_depth))
        return drafters[0] if len(drafters) == 1 else CombinedDrafter(drafters)

    return make


def _encoder(tokenizer_dir: str) -> Callable[[str], tuple[int, ...]]:
    from transformers import AutoTokenizer  # heavy: imported only when the command runs

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    return lambda text: tuple(tokenizer.encode(text, add_special_tokens=False)) if text else ()


def _tokenize_group(group, encode) -> TokenizedGroup:
    return TokenizedGroup(encode(group.prompt), tuple(encode(r) for r in group.responses))


def _tokenize_history(history, encode) -> TokenizedHistory:
    return TokenizedHistory(encode(history.prompt), tuple(encode(r) for r in history.responses))


def _print(stats: ReplayStats, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(stats.as_dict()))
        return
    for key, value in stats.as_dict().items():
        print(f"{key:>24}: {value}")
