"""What telemetry counts as emitted is what the requests kept: a draft accepted past a stop token
is verified, but not output, and tokens a forward must not count it."""

from __future__ import annotations

from dataclasses import replace

from specroll.drafting.oracle import OracleDrafter
from specroll.policies.fixed import FixedDraftLength

from helpers import rollout, workload


def test_emitted_counts_only_tokens_kept_before_a_stop(qwen2_dir):
    unstopped = rollout(qwen2_dir, workload(max_tokens=24))
    outputs = {r.request_id: r.output_token_ids for r in unstopped}
    stop = unstopped[0].output_token_ids[5]  # a token that comes mid-output
    requests = workload(max_tokens=24)
    for r in requests:
        r.params = replace(r.params, stop_token_ids=(stop,))
    # perfect drafts of the unstopped outputs run on past the stop token, and verification accepts them
    stopped = rollout(qwen2_dir, requests, OracleDrafter(outputs), FixedDraftLength(4))
    telemetry = rollout.last_engine.telemetry
    assert any(len(r.output_token_ids) < len(outputs[r.request_id]) for r in stopped)
    first_tokens = len(stopped)  # each request's prefill drew its first token
    emitted = sum(f.num_emitted for f in telemetry.decode_forwards)
    assert emitted == sum(len(r.output_token_ids) for r in stopped) - first_tokens
    verified = sum(f.num_accepted + f.batch_size for f in telemetry.decode_forwards)
    assert verified > emitted  # some forward verified tokens past a stop: counting those would differ


def test_telemetry_rows_hold_every_field_and_read_back():
    from dataclasses import asdict

    from specroll.engine.telemetry import Telemetry, forward_from_row
    from specroll.policies.base import ForwardStats

    forward = ForwardStats(
        2, 3, 1, 3, 0.01, 0.002, (4, 9), (2, 1), (1, 0), ("grouped", ""), "suffix", True, 1e-4
    )
    telemetry = Telemetry()
    telemetry.record_decode(forward)
    (row,) = telemetry.as_rows()
    assert row == asdict(forward)
    assert forward_from_row(row) == forward
