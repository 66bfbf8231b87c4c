"""The replay protocol: literal accepted lengths, totals on a tiny data set, and the CLI end to end."""

import json
from pathlib import Path

import pytest

from specroll.cli import main
from specroll.drafteval.protocols import TokenizedGroup, TokenizedHistory, evaluate_grouped, evaluate_history
from specroll.drafteval.replay import replay
from specroll.drafting.grouped import GroupedDrafter
from specroll.drafting.history import HistoryDrafter
from specroll.drafting.protocol import BaseDrafter, Draft, RequestInfo

TOKENIZER = Path(__file__).resolve().parents[3] / "shared/data/tokenizers/qwen2"


def test_a_linear_draft_keeps_its_matching_prefix():
    draft = Draft(0, [5, 6, 9, 8])
    assert draft.kept_in_exact_mode([5, 6, 7, 8]) == 2
    assert draft.kept_in_exact_mode([5, 6, 9, 8]) == 4
    assert Draft(0, [5, 6, 9]).kept_in_exact_mode([5, 6]) == 2


def test_a_tree_keeps_its_deepest_matching_path():
    #        -> 5 -> 6
    # root -> 7 -> 8 -> 9
    draft = Draft(0, [5, 7, 6, 8, 9], parents=[-1, -1, 0, 1, 3])
    assert draft.kept_in_exact_mode([7, 8, 9, 1]) == 3
    assert draft.kept_in_exact_mode([5, 6, 1]) == 2
    assert draft.kept_in_exact_mode([7, 2]) == 1
    assert draft.kept_in_exact_mode([3]) == 0


class _Oracle(BaseDrafter):
    """Drafts the next two recorded tokens, the second one wrong."""

    def __init__(self, response):
        self.response, self.position = response, 0

    def propose(self, queries):
        nxt = self.response[self.position : self.position + 1]
        return [Draft(q.request_id, nxt + [-5]) for q in queries]

    def observe(self, request_id, token_ids):
        self.position += len(token_ids)


def test_replay_advances_by_accepted_tokens_plus_one_bonus():
    response = [1, 2, 3, 4, 5]
    stats = replay(_Oracle(response), RequestInfo(0, 0, (9,)), response, max_draft=2)
    # steps: [1 + bonus 2], [3 + bonus 4], [5, no bonus left]
    assert (stats.num_forwards, stats.target_tokens, stats.accepted_tokens, stats.drafted_tokens) == (
        3,
        5,
        3,
        6,
    )
    assert stats.mean_acceptance_length == pytest.approx(5 / 3)


def test_grouped_protocol_on_two_identical_responses():
    group = TokenizedGroup((), ((1, 2, 3, 4), (1, 2, 3, 4)))
    stats = evaluate_grouped([group], GroupedDrafter, num_refs=1, max_draft=8)
    # each target drafts the whole reference at its start: one step of 4 tokens
    assert (stats.num_forwards, stats.target_tokens, stats.accepted_tokens) == (2, 8, 8)


def test_history_protocol_uses_the_previous_step():
    problem = TokenizedHistory((), ((1, 2, 3), (1, 2, 3), (4, 5)))
    stats = evaluate_history([problem], lambda: HistoryDrafter(window=1), max_draft=8)
    # step 1 replays [1, 2, 3] in one step; step 2's [4, 5] is new: two steps of a bonus token each
    assert (stats.num_forwards, stats.target_tokens, stats.accepted_tokens) == (3, 5, 3)


@pytest.mark.skipif(not TOKENIZER.exists(), reason="shared tokenizer not present")
@pytest.mark.parametrize("mode", ["grouped", "history"])
def test_cli_prints_one_json_line(tmp_path, capsys, mode):
    data = tmp_path / "rollouts.jsonl"
    if mode == "grouped":
        rows = [{"prompt_id": "p", "prompt": None, "responses": ["1 + 2 = 3", "1 + 2 = 3", "2 + 2 = 4"]}]
    else:
        rows = [{"prompt_id": "p", "prompt": "Add.", "step": s, "response": "1 + 2 = 3"} for s in (5, 9)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [
        "drafteval",
        "--data",
        str(data),
        "--tokenizer",
        str(TOKENIZER),
        "--mode",
        mode,
        "--refs",
        "1",
        "--window",
        "1",
        "--json",
    ]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {
        "mean_acceptance_length",
        "num_forwards",
        "target_tokens",
        "drafted_tokens",
        "accepted_tokens",
        "us_per_proposal",
        "us_per_forward",
    }
    assert result["mean_acceptance_length"] > 1.0


def test_histories_are_ordered_by_prompt_id_or_by_file(tmp_path):
    from specroll.drafteval.data import load_histories

    data = tmp_path / "history.jsonl"
    rows = [
        {"prompt_id": p, "prompt": "", "step": s, "response": f"{p}@{s}"}
        for s in (7, 3)
        for p in ("p-2", "p-10", "p-1")
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [h.prompt_id for h in load_histories(data)] == ["p-1", "p-10", "p-2"]
    assert [h.prompt_id for h in load_histories(data, "file")] == ["p-2", "p-10", "p-1"]
    assert load_histories(data)[0].responses == ("p-1@3", "p-1@7")  # oldest step first
