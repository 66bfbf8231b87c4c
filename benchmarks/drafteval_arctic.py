"""ArcticInference's SuffixDecodingCache through specroll's replay protocols, for like-for-like figures.

Same data loading, tokenization, targets and references as `specroll drafteval`; only the drafter
differs (`benchmarks/arctic_drafter.py`). Needs arctic_inference importable (built from its source).

    python benchmarks/drafteval_arctic.py --data ../shared/data/rollouts/skyt1_aime24_short_ckpts.jsonl \\
        --tokenizer ../shared/data/tokenizers/qwen2 --mode history --values 0 1 3 10 [--tree]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.arctic_drafter import IS_AVAILABLE, ArcticDrafter  # noqa: E402
from specroll.commands.drafteval import DEFAULT_MAX_GROUPS, _encoder, _tokenize_group, _tokenize_history  # noqa: E402
from specroll.drafteval.data import PROBLEM_ORDERS, load_groups, load_histories  # noqa: E402
from specroll.drafteval.protocols import evaluate_grouped, evaluate_history  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--mode", choices=("grouped", "history"), default="grouped")
    p.add_argument("--values", type=int, nargs="+", default=[0, 1, 3], help="N (grouped) or W (history)")
    p.add_argument("--max-draft", type=int, default=8)
    p.add_argument("--tree", action="store_true", help="tree drafts of at most 16 tokens")
    p.add_argument("--problem-order", choices=PROBLEM_ORDERS, default="sorted")
    args = p.parse_args()
    if not IS_AVAILABLE:
        raise SystemExit("arctic_inference is not importable")
    encode, limit = _encoder(args.tokenizer), DEFAULT_MAX_GROUPS[args.mode]
    tree_tokens = 16 if args.tree else 0
    if args.mode == "grouped":
        groups = [_tokenize_group(g, encode) for g in load_groups(args.data)[:limit]]
    else:
        problems = [
            _tokenize_history(h, encode) for h in load_histories(args.data, args.problem_order)[:limit]
        ]
    for value in args.values:
        if args.mode == "grouped":
            stats = evaluate_grouped(groups, lambda: ArcticDrafter(None, tree_tokens), value, args.max_draft)
        else:
            stats = evaluate_history(problems, lambda: ArcticDrafter(value, tree_tokens), args.max_draft)
        print(
            json.dumps({"mode": args.mode, "value": value, "tree": args.tree, **stats.as_dict()}), flush=True
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
