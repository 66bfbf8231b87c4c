"""A real TRL GRPOTrainer whose rollouts run on the specroll engine (two optimizer steps on the
bundled policy), and the adapter's reading of TRL's prompts and generation settings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specroll.engine.request import SamplingParams
from specroll.integrations.trl import (
    TrlRolloutConfig,
    check_room,
    encode_prompts,
    make_rollout_func,
    rollout_config,
    sample_indices,
    sampling_params,
)
from specroll.rollout import DEFAULT_MODEL
from specroll.tasks import get_task
from specroll.tokenizer import load_tokenizer

NUM_PROMPTS, NUM_GENERATIONS, MAX_COMPLETION, TEMPERATURE = 4, 4, 16, 0.8
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant\n{% endif %}"
)


def _prompts(num: int = NUM_PROMPTS) -> list[str]:
    return [p.prompt for p in get_task("running_sum").problems(num, 0)]


def _shorter_is_better(completions, **_):
    return [-float(len(c)) for c in completions]


def _logprobs_as_trl_computes(model, output) -> list[list[float]]:
    """Each returned token's log-probability as TRL's GRPOTrainer computes it on its side: the
    trainer model's logits over its temperature, `selective_log_softmax` over the whole vocabulary."""
    from trl.trainer.utils import selective_log_softmax

    out = []
    with torch.no_grad():
        for prompt, completion in zip(output["prompt_ids"], output["completion_ids"]):
            ids = torch.tensor([prompt + completion])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / TEMPERATURE
            out.append(selective_log_softmax(logits, torch.tensor(completion)).tolist())
    return out


@pytest.mark.parametrize(
    "truncation",
    [dict(), dict(top_k=3), dict(top_p=0.8), dict(top_k=3, top_p=0.8)],
    ids=["full", "top-k", "top-p", "both"],
)
def test_grpo_trainer_runs_two_steps_on_specroll_rollouts(tmp_path, monkeypatch, truncation):
    trl = pytest.importorskip("trl", reason="the TRL adapter needs trl (pip install specroll[trl])")
    datasets = pytest.importorskip(
        "datasets", reason="TRL's trainer needs datasets (pip install specroll[trl])"
    )
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    # a fixed policy: whether `auto` drafts depends on the forwards it times (a loaded machine drafts
    # nothing), and this test asks that the drafts TRL's rollouts went through were verified
    rollout = make_rollout_func(DEFAULT_MODEL, max_batch_size=16, policy="fixed-2")
    calls, logprob_errors, weights_matched, engine_weights = [], [], [], []

    def recording_rollout(prompts, trainer):
        output = rollout(prompts, trainer)
        expected = _logprobs_as_trl_computes(trainer.model, output)
        logprob_errors.append(
            max(
                abs(a - b)
                for got, want in zip(output["logprobs"], expected)
                for a, b in zip(got, want, strict=True)
            )
        )
        calls.append((list(prompts), output, trainer.state.global_step))
        return output

    def reward_checking_weights(completions, **_):
        # TRL scores a generation batch right after generating it, before the optimizer steps
        engine_params = dict(rollout.engine.parts_for_testing().runner.model.named_parameters())
        weights_matched.append(
            all(torch.equal(engine_params[name], p.detach()) for name, p in trainer.model.named_parameters())
        )
        engine_weights.append({name: p.clone() for name, p in engine_params.items()})
        return [0.0] * len(completions)

    # decoupled weight decay moves every weight at every step, whatever the rewards;
    # bf16=False: TRL's default autocasts its forwards to bf16 where the engine runs fp32
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=8,
        num_generations=NUM_GENERATIONS,
        max_completion_length=MAX_COMPLETION,
        temperature=TEMPERATURE,
        **truncation,
        learning_rate=1e-3,
        weight_decay=0.1,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    trainer = trl.GRPOTrainer(
        model=str(DEFAULT_MODEL),
        reward_funcs=[_shorter_is_better, reward_checking_weights],
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": _prompts()}),
        rollout_func=recording_rollout,
    )
    trainer.train()

    assert trainer.state.global_step == 2
    assert [step for *_, step in calls] == [0, 1]  # one generation batch per optimizer step
    assert weights_matched == [True, True]  # the engine ran the trainer's weights at each step...
    before, after = engine_weights
    assert any(not torch.equal(before[name], after[name]) for name in before)  # ...which had moved
    # the sampled tokens' logprobs as TRL computes them: its ratio is 1 before an update, whatever
    # top-k and top-p
    assert max(logprob_errors) < 1e-5
    assert rollout.num_requests == 16  # request ids run on across calls
    for prompts, output, _ in calls:
        assert len(prompts) == 8 and sample_indices(prompts) == [0, 1, 2, 3] * 2  # TRL repeats in a row
        assert [len(output[k]) for k in ("prompt_ids", "completion_ids", "logprobs")] == [8, 8, 8]
        assert [trainer.processing_class.decode(ids) for ids in output["prompt_ids"]] == prompts
        for ids, logprobs in zip(output["completion_ids"], output["logprobs"]):
            assert 1 <= len(ids) <= MAX_COMPLETION and len(logprobs) == len(ids)
    telemetry = rollout.engine.telemetry  # of the last call
    assert sum(s.num_drafted for s in telemetry.decode_forwards) > 0
    assert telemetry.mean_acceptance_length > 1.0


def test_sample_indices_count_within_runs_of_identical_prompts():
    assert sample_indices(["a", "a", "b", "b", "b", "a"]) == [0, 1, 0, 1, 2, 0]
    assert sample_indices([]) == []


def _trainer(**settings) -> SimpleNamespace:
    tokenizer = load_tokenizer(DEFAULT_MODEL).hf
    defaults = dict(
        processing_class=tokenizer,
        chat_template=None,
        tools=None,
        chat_template_kwargs={},
        max_completion_length=16,
        temperature=0.7,
        top_k=5,
        top_p=0.9,
        min_p=None,
        repetition_penalty=1.0,
        args=SimpleNamespace(generation_kwargs=None),
    )
    return SimpleNamespace(**{**defaults, **settings})


def test_prompts_are_encoded_as_trl_would_text_as_is_conversations_in_the_template():
    trainer = _trainer()
    text = _prompts(2)
    assert [trainer.processing_class.decode(ids) for ids in encode_prompts(text, trainer)] == text
    conversations = [[{"role": "user", "content": t}] for t in text]
    with pytest.raises(ValueError, match="no chat template"):
        encode_prompts(conversations, trainer)
    trainer.processing_class.chat_template = TEMPLATE
    decoded = [trainer.processing_class.decode(ids) for ids in encode_prompts(conversations, trainer)]
    assert decoded == [f"user {t}\nassistant\n" for t in text]


def test_sampling_follows_the_trainer_and_refuses_what_the_engine_lacks():
    params = sampling_params(_trainer())
    assert (params.max_tokens, params.temperature, params.top_k, params.top_p) == (16, 0.7, 5, 0.9)
    assert params.stop_token_ids == (1,)  # <eos>
    for name, setting in (
        ("min_p", {"min_p": 0.1}),
        ("repetition_penalty", {"repetition_penalty": 1.2}),
        ("generation_kwargs", {"args": SimpleNamespace(generation_kwargs={"num_beams": 2})}),
    ):
        with pytest.raises(ValueError, match=name):
            sampling_params(_trainer(**setting))
    with pytest.raises(ValueError, match="max_completion_length"):
        sampling_params(_trainer(max_completion_length=None))


def test_a_prompt_too_long_for_the_engine_is_refused_before_anything_is_queued():
    engine = SimpleNamespace(context_room=40)
    check_room([[3] * 24, [3] * 8], SamplingParams(max_tokens=16), engine)  # 24 + 16 fits 40
    with pytest.raises(ValueError, match="max_prompt_length"):
        check_room([[3] * 25], SamplingParams(max_tokens=16), engine)


def test_the_batch_check_is_the_engines_own_rule():
    from specroll.engine.engine import add_requests
    from specroll.engine.factory import build_engine
    from specroll.engine.request import Request
    from specroll.engine_config import EngineConfig
    from specroll.rollout import RolloutConfig

    engine = build_engine(
        RolloutConfig(speculate="off", max_tokens=16, engine=EngineConfig(max_batch_size=2)).engine_spec(), 24
    )
    params = SamplingParams(max_tokens=16)
    fits, too_long = [3] * (engine.context_room - 16), [3] * (engine.context_room - 15)
    check_room([fits], params, engine)
    with pytest.raises(ValueError, match="max_prompt_length"):
        check_room([too_long], params, engine)
    errors = add_requests(
        engine, [Request(0, 0, 0, tuple(fits), params), Request(1, 1, 0, tuple(too_long), params)]
    )
    assert list(errors) == [1]  # the scheduler refuses exactly what the batch check refuses


def _trainer_on_the_cpu():
    """A trainer whose model (the bundled policy's name) holds its parameters on the CPU."""
    model = SimpleNamespace(name_or_path=str(DEFAULT_MODEL), parameters=lambda: iter([torch.zeros(1)]))
    return _trainer(
        model=model,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        args=SimpleNamespace(generation_kwargs=None, seed=3),
        state=SimpleNamespace(global_step=0),
    )


def test_cuda_graphs_follow_the_trainer_models_device():
    trainer = _trainer_on_the_cpu()
    params = sampling_params(trainer)
    assert not rollout_config(
        TrlRolloutConfig(), trainer, params
    ).engine.cuda_graphs  # the model is on the CPU
    assert rollout_config(TrlRolloutConfig(cuda_graphs="on"), trainer, params).engine.cuda_graphs
    with pytest.raises(ValueError, match="'always'"):
        TrlRolloutConfig(cuda_graphs="always")


def test_the_engines_settings_are_one_engine_config_and_the_trainer_settles_device_seed_and_graphs():
    from specroll.engine_config import EngineConfig

    trainer = _trainer_on_the_cpu()
    params = sampling_params(trainer)
    config = make_rollout_func(DEFAULT_MODEL, max_batch_size=16, max_draft=3, batch_invariant=False).config
    assert config.engine == EngineConfig(max_batch_size=16, max_draft=3, batch_invariant=False)
    engine = rollout_config(config, trainer, params).engine
    assert (engine.max_batch_size, engine.max_draft, engine.seed, engine.batch_invariant) == (16, 3, 3, False)
    assert rollout_config(TrlRolloutConfig(seed=7), trainer, params).engine.seed == 7
    assert rollout_config(TrlRolloutConfig(), trainer, params).engine.batch_invariant  # on the CPU
    with pytest.raises(ValueError, match="seed follow the trainer"):
        TrlRolloutConfig(engine=EngineConfig(seed=7))
    with pytest.raises(ValueError, match="max_batch_size must be positive"):
        make_rollout_func(max_batch_size=0)
