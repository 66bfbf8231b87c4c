"""The shape diff of scripts/serve_conformance.py: JSON key paths and types, never values; literal
cases, no server."""

from __future__ import annotations

import pytest
from conformance_script import RECORDING, load

conf = load()


def test_shape_lists_every_key_path_with_its_types():
    assert conf.shape({"a": 1, "b": [1.5, None], "c": {"d": "x", "e": True}}) == {
        "$": {"object"},
        "$.a": {"int"},
        "$.b": {"list"},
        "$.b[]": {"float", "null"},
        "$.c": {"object"},
        "$.c.d": {"str"},
        "$.c.e": {"bool"},
    }


def test_a_field_missing_from_some_items_of_a_list_is_marked_absent():
    types = conf.shape({"choices": [{"x": 1, "y": None}, {"x": 2}]})
    assert types["$.choices[].x"] == {"int"} and types["$.choices[].y"] == {"null", "absent"}


def test_token_keyed_objects_merge_their_keys_so_tokens_never_differ():
    ours = {"choices": [{"logprobs": {"top_logprobs": [{" the": -0.1, "a": -2.0}]}}]}
    theirs = {"choices": [{"logprobs": {"top_logprobs": [{"dog": -0.3}]}}]}
    assert conf.diff_shapes(conf.shape(ours), conf.shape(theirs)).is_same
    prompt = {"prompt_logprobs": [None, {"42": {"logprob": -1.0, "rank": 3, "decoded_token": "x"}}]}
    assert "$.prompt_logprobs[]{*}.rank" in conf.shape(prompt)


def test_values_never_differ_only_types_and_paths():
    assert conf.diff_shapes(conf.shape({"id": "a", "n": 1}), conf.shape({"id": "b", "n": 9})).is_same
    diff = conf.diff_shapes(conf.shape({"n": 1, "mine": 0}), conf.shape({"n": 1.0, "yours": []}))
    assert diff.only_a == ["$.mine"] and diff.only_b == ["$.yours"]
    assert diff.types == [("$.n", {"int"}, {"float"})]


def test_fields_below_a_missing_or_null_object_are_not_reported_again():
    ours = {"usage": {"prompt_tokens": 1}, "logprobs": None}
    theirs = {"extra": {"deep": {"deeper": 1}}, "logprobs": {"tokens": ["a"]}}
    diff = conf.diff_shapes(conf.shape(ours), conf.shape(theirs))
    assert diff.only_a == ["$.usage"] and diff.only_b == ["$.extra"]
    assert diff.types == [("$.logprobs", {"null"}, {"object"})]


def test_known_extras_are_set_aside():
    diff = conf.diff_shapes(conf.shape({"seed": 1, "x": 1}), conf.shape({"kv_transfer_params": None}))
    shown, known = conf.split_known(diff)
    assert shown.only_a == ["$.x"] and not shown.only_b
    assert known.only_a == ["$.seed"] and known.only_b == ["$.kv_transfer_params"]


def test_a_stream_is_compared_by_its_first_and_last_chunks_and_its_end():
    chunks = [{"choices": [{"text": "a"}]}, {"choices": [], "usage": {"prompt_tokens": 1}}]
    types = conf.answer_shape(conf.Answer(200, events=chunks, is_done=True))
    assert types["$first.choices[].text"] == {"str"} and types["$last.usage.prompt_tokens"] == {"int"}
    assert types["$events[].usage"] == {"object", "absent"} and types["$done"] == {"[DONE]"}
    unfinished = conf.answer_shape(conf.Answer(200, events=chunks))
    assert conf.diff_shapes(types, unfinished).types == [("$done", {"[DONE]"}, {"missing"})]


def test_server_sent_events_are_read_into_chunks():
    raw = b'data: {"a": 1}\n\ndata: {"a": 2}\n\ndata: [DONE]\n\n'
    answer = conf._events(200, raw)
    assert answer.events == [{"a": 1}, {"a": 2}] and answer.is_done


@pytest.mark.parametrize("raw,body", [(b"", conf.EMPTY), (b"<html>", conf.NOT_JSON), (b"[1]", [1])])
def test_a_body_that_is_not_json_is_a_type_of_its_own(raw, body):
    assert conf._body(raw) == body


def test_a_status_difference_is_reported():
    error = conf.Observed(400, conf.shape({"error": {"message": "m"}}))
    ok = conf.Observed(200, conf.shape({"choices": []}))
    finding = conf.compare("bad: x", error, ok)
    report = conf.render([finding, conf.compare("same", ok, ok)], ("specroll", "vllm"))
    assert not finding.is_same and "status: specroll 400, vllm 200" in report
    assert "= same" in report and report.endswith("0 differ on purpose, 1 otherwise")


def test_a_recording_reads_back_what_was_written(tmp_path):
    observed = {"GET /x": conf.Observed(200, conf.shape({"a": [1, None]}))}
    conf.write_recording(tmp_path / "r.json", observed, "0.0.1", 99)
    assert conf.read_recording(tmp_path / "r.json") == (observed, "0.0.1", 99)


def test_the_stored_recording_covers_every_probe():
    recorded, version, long_prompt = conf.read_recording(RECORDING)
    assert version == "0.32.0" and set(recorded) == {p.name for p in conf.probes(long_prompt)}


def test_every_probe_names_the_model_by_placeholder_where_it_names_one():
    body = conf._with_model({"model": conf.MODEL, "x": [conf.MODEL]}, "smollm2")
    assert body == {"model": "smollm2", "x": ["smollm2"]}
    assert len({p.name for p in conf.probes(100)}) == len(conf.probes(100))


def test_metric_series_keep_the_load_series_and_their_label_names():
    text = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
        'vllm:request_success_total{engine="0",finished_reason="stop"} 2.0\n'
        "vllm:other_total 3\n"
        "specroll_requests_running 0\n"
    )
    assert conf.metric_series(text) == {
        "vllm:num_requests_running": {"engine": "", "model_name": ""},
        "vllm:request_success_total": {"engine": "", "finished_reason": ""},
    }
