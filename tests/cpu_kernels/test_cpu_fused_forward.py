"""The model on specroll's CPU kernels: the engine's fused path (q, k, v in one call, rotary with the
cache write, gate and up in one call) gives the training path's bits, rotary gives torch's, and a
row's logits are its own whatever the batch, the width or the other rows."""

from __future__ import annotations

import pytest
import torch

from specroll.cpu_kernels import ops
from specroll.model.kv_cache import KVCache
from specroll.model.loader import load_model
from specroll.model.rope import apply_rotary
from specroll.model.runner import ModelRunner, SequenceInput


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    from tiny_checkpoints import save_tiny_checkpoint

    directory = tmp_path_factory.mktemp("llama-cpu-kernels")
    save_tiny_checkpoint("llama", directory)
    model = load_model(directory, dtype=torch.bfloat16)
    runner = ModelRunner(model, 4, 160, batch_invariant=True, kernels="cpu")
    assert runner.kernels == "cpu" and runner.model.linear_kernels == "specroll's CPU kernels"
    return runner


def test_rotary_write_gives_torchs_rotary_bits_and_writes_the_cache():
    g = torch.Generator().manual_seed(0)
    B, T, H, Hkv, D = 2, 3, 4, 2, 64
    qkv = torch.randn(B, T, (H + 2 * Hkv) * D, generator=g).bfloat16()
    cos, sin = (
        torch.randn(B, 1, T, D, generator=g).bfloat16(),
        torch.randn(B, 1, T, D, generator=g).bfloat16(),
    )
    keys, values = torch.zeros(5, Hkv, 8, D).bfloat16(), torch.zeros(5, Hkv, 8, D).bfloat16()
    slots, columns = torch.tensor([3, 1]), torch.tensor([[4, 5, 6], [0, 1, 2]])
    index = (slots[:, None, None] * Hkv + torch.arange(Hkv)[None, :, None]) * 8 + columns[:, None, :]
    q = ops.rotary_write(qkv, (cos, sin), keys, values, index.reshape(-1), H, Hkv)
    split = qkv.view(B, T, H + 2 * Hkv, D).transpose(1, 2)
    assert torch.equal(q, apply_rotary(split[:, :H], cos, sin))
    assert torch.equal(keys[3, :, 4:7], apply_rotary(split[:, H : H + Hkv], cos, sin)[0])
    assert torch.equal(values[1, :, 0:3], split[1, H + Hkv :])
    with pytest.raises(RuntimeError, match="outside the cache"):
        ops.rotary_write(qkv, (cos, sin), keys, values, index.reshape(-1) + 1000, H, Hkv)


def _prefill_and_step(runner: ModelRunner, grad: bool) -> torch.Tensor:
    runner.use_new_cache(4, 160)
    prompts = [list(range(3, 3 + n)) for n in (17, 40, 5)]
    with torch.set_grad_enabled(grad):
        for slot, prompt in enumerate(prompts):
            batch = runner.prepare([SequenceInput(slot, 0, prompt)])
            runner.model(batch, runner.cache)
        step = [SequenceInput(s, len(p), [7, 8, 9], num_logits=3) for s, p in enumerate(prompts)]
        logits, _ = runner.model(runner.prepare(step), runner.cache)
    return logits.detach()


def test_the_fused_path_gives_the_separate_layers_bits(runner):
    fused, separate = _prefill_and_step(runner, grad=False), _prefill_and_step(runner, grad=True)
    assert torch.equal(fused, separate)


def test_a_rows_logits_are_the_same_alone_and_in_any_batch(runner):
    runner.use_new_cache(4, 160)
    prompts = [list(range(5, 5 + n)) for n in (30, 12, 64, 3)]
    for slot, prompt in enumerate(prompts):
        runner.forward([SequenceInput(slot, 0, prompt)])
    together = runner.forward([SequenceInput(s, len(p), [11]) for s, p in enumerate(prompts)]).logits
    for slot, prompt in enumerate(prompts):
        alone = runner.forward([SequenceInput(slot, len(prompt), [11])]).logits
        assert torch.equal(alone[0, 0], together[slot, 0])
        wide = runner.forward([SequenceInput(slot, len(prompt), [11, 12, 13], num_logits=3)]).logits
        assert torch.equal(wide[0, 0], together[slot, 0])


def test_a_wider_cache_takes_the_separate_path_and_gives_the_same_bits(runner):
    """An fp32 cache holds the same bf16 values widened: the separate path writes it, attention reads
    it narrowed, and the logits are the bf16 cache's to the bit."""
    tokens = [SequenceInput(0, 0, [1, 2, 3, 4, 5]), SequenceInput(1, 0, [6, 7])]
    runner.use_new_cache(4, 160)
    narrow = runner.forward(tokens).logits
    runner.cache = KVCache(runner.config, 4, 160, dtype=torch.float32, column_multiple=64)
    wide = runner.forward(tokens).logits
    runner.use_new_cache(4, 160)
    assert torch.equal(wide, narrow)


def test_padding_skips_the_mlp_and_the_lm_head_and_changes_no_row(runner, monkeypatch):
    """Rows of 1, 3 and 2 new tokens: the MLP runs on the 6 real tokens (not 9), the LM head on the 6
    logit rows; each row's logits are those it has alone (a padding row's are zero)."""
    runner.use_new_cache(4, 160)
    prompts = [list(range(5, 5 + n)) for n in (20, 9, 33)]
    for slot, prompt in enumerate(prompts):
        runner.forward([SequenceInput(slot, 0, prompt)])
    step = [
        SequenceInput(s, len(p), new, num_logits=len(new))
        for s, (p, new) in enumerate(zip(prompts, [[11], [12, 13, 14], [15, 16]]))
    ]
    rows_seen = []
    mlp = type(runner.model.model.layers[0].mlp)
    forward = mlp.forward
    monkeypatch.setattr(
        mlp, "forward", lambda self, x: rows_seen.append(x.numel() // x.shape[-1]) or forward(self, x)
    )
    together = runner.forward(step).logits
    assert set(rows_seen) == {6}
    monkeypatch.setattr(mlp, "forward", forward)
    for s, sequence in enumerate(step):
        alone = runner.forward([sequence]).logits
        n = sequence.num_logits
        assert torch.equal(alone[0, :n], together[s, :n])
        assert not together[s, n:].any()
