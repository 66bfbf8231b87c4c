"""Train the bundled default policy and draft model on the running-sum task, on CPU.

    python scripts/train_default.py            # writes checkpoints/policy and checkpoints/draft

Steps: build the task's character-level tokenizer, sample training problems from the very
distribution rollouts use, train a 4-layer Qwen2 policy and a 1-layer Qwen2 draft model with
next-token loss on the response tokens only, and save both in Hugging Face format with the tokenizer.
Seeded, so a rerun reproduces the checkpoints (up to CPU floating-point nondeterminism).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from specroll.tasks import DEFAULT_TASK, Problem, get_task  # noqa: E402
from specroll.tasks.running_sum import ANSWER_WORD, PROMPT_WORD, TERM_LABELS  # noqa: E402

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = [PAD, EOS, UNK]
# Byte-level symbols, as Qwen2's tokenizer spells text: "Ġ" is a space, "Ċ" a newline.
BASE_SYMBOLS = list("0123456789+=") + ["Ġ", "Ċ"] + sorted(set(PROMPT_WORD + ANSWER_WORD + TERM_LABELS))
# Qwen2's pre-tokenizer: digits one by one, letters in runs, newlines apart (the Qwen2 pattern).
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
MAX_POSITIONS = 1024


@dataclass(frozen=True)
class ModelSize:
    """Shape of one Qwen2 model."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(f"heads must divide hidden size and KV heads divide heads: {self}")


@dataclass(frozen=True)
class TrainConfig:
    """One model's training run."""

    size: ModelSize
    num_steps: int
    tokens_per_batch: int  # padded tokens per optimizer step
    learning_rate: float
    warmup_steps: int = 100
    weight_decay: float = 0.01

    def __post_init__(self) -> None:
        if self.num_steps <= self.warmup_steps:
            raise ValueError(f"num_steps {self.num_steps} must exceed warmup_steps {self.warmup_steps}")


POLICY = TrainConfig(ModelSize(128, 4, 4, 2, 512), num_steps=2600, tokens_per_batch=4096, learning_rate=3e-3)
DRAFT = TrainConfig(ModelSize(64, 1, 4, 2, 256), num_steps=800, tokens_per_batch=4096, learning_rate=3e-3)
SEED = 0


def word_merges(word: str) -> list[tuple[str, str]]:
    """BPE merges that build `word` left to right from its letters, so it becomes one token."""
    return [(word[:end], word[end]) for end in range(1, len(word))]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of ~80 tokens, laid out exactly as Qwen2's tokenizer is.

    `AutoTokenizer` rebuilds any tokenizer of a qwen2 checkpoint as `Qwen2Tokenizer` (BPE, NFC, the
    Qwen2 split pattern, byte-level), keeping only the vocabulary and merges; building it the same
    way here makes the saved files load back unchanged.
    """
    merges = [merge for word in (PROMPT_WORD, ANSWER_WORD) for merge in word_merges(word)]
    symbols = SPECIAL_TOKENS + BASE_SYMBOLS + ["".join(merge) for merge in merges]
    vocab = {symbol: index for index, symbol in enumerate(dict.fromkeys(symbols))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        model_max_length=MAX_POSITIONS,
    )


def build_model(size: ModelSize, tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForCausalLM(config)


def encode_example(problem: Problem, tokenizer: PreTrainedTokenizerFast) -> tuple[list[int], int]:
    """Token ids of prompt + response + eos, and the number of prompt tokens (not trained on)."""
    prompt_ids = tokenizer.encode(problem.prompt, add_special_tokens=False)
    response_ids = tokenizer.encode(problem.reference_response, add_special_tokens=False)
    return prompt_ids + response_ids + [tokenizer.eos_token_id], len(prompt_ids)


def make_batches(
    examples: list[tuple[list[int], int]], tokens_per_batch: int, rng: random.Random
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of similar-length examples so little compute goes to padding, in shuffled order."""
    examples = sorted(examples, key=lambda example: len(example[0]))
    batches, start = [], 0
    while start < len(examples):
        end = start + 1
        while end < len(examples) and (end - start + 1) * len(examples[end][0]) <= tokens_per_batch:
            end += 1
        batches.append(collate(examples[start:end]))
        start = end
    rng.shuffle(batches)
    return batches


def collate(examples: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels), both (B, T); labels are -100 on prompt and padding."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.zeros(len(examples), width, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for row, (ids, num_prompt_tokens) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, num_prompt_tokens : len(ids)] = torch.tensor(ids[num_prompt_tokens:])
    return input_ids, labels


def learning_rate_at(step: int, config: TrainConfig) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / (config.num_steps - config.warmup_steps)
    return config.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_stream(tokenizer: PreTrainedTokenizerFast, config: TrainConfig, seed: int):
    """Endless batches of fresh problems; each refill draws a new seeded chunk of the task."""
    task, rng, chunk = get_task(DEFAULT_TASK), random.Random(seed), 0
    while True:
        problems = task.problems(4096, seed=seed * 1_000_003 + chunk)
        examples = [encode_example(problem, tokenizer) for problem in problems]
        yield from make_batches(examples, config.tokens_per_batch, rng)
        chunk += 1


def train(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, config: TrainConfig, label: str
) -> float:
    """Train in place; returns the wall-clock seconds taken."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(0.9, 0.98), weight_decay=config.weight_decay
    )
    batches, started, smoothed_loss = batch_stream(tokenizer, config, SEED), time.time(), None
    model.train()
    for step in range(config.num_steps):
        input_ids, labels = next(batches)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, config)
        loss = model(input_ids=input_ids, attention_mask=(input_ids != 0).long(), labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        smoothed_loss = loss.item() if smoothed_loss is None else 0.98 * smoothed_loss + 0.02 * loss.item()
        if step % 50 == 0 or step == config.num_steps - 1:
            elapsed = time.time() - started
            print(f"[{label}] step {step:5d} loss {smoothed_loss:.4f} {elapsed:7.1f}s", flush=True)
    model.eval()
    return time.time() - started


def save(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, max_new_tokens=512
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=REPO_ROOT / "checkpoints")
    parser.add_argument("--policy-steps", type=int, default=POLICY.num_steps)
    parser.add_argument("--draft-steps", type=int, default=DRAFT.num_steps)
    parser.add_argument("--tokens-per-batch", type=int, default=POLICY.tokens_per_batch)
    parser.add_argument("--learning-rate", type=float, default=POLICY.learning_rate)
    # on a machine shared with other jobs one thread beats two: two threads spin at every barrier
    parser.add_argument("--num-threads", type=int, default=2)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.num_threads)
    tokenizer = build_tokenizer()
    common = dict(tokens_per_batch=args.tokens_per_batch, learning_rate=args.learning_rate)
    runs = [
        ("policy", replace(POLICY, num_steps=args.policy_steps, **common)),
        ("draft", replace(DRAFT, num_steps=args.draft_steps, **common)),
    ]
    for label, config in runs:
        torch.manual_seed(SEED)
        model = build_model(config.size, tokenizer)
        num_params = sum(p.numel() for p in model.parameters())
        print(f"[{label}] {num_params / 1e6:.2f}M parameters, {config}", flush=True)
        seconds = train(model, tokenizer, config, label)
        save(model, tokenizer, args.out_dir / label)
        print(f"[{label}] trained in {seconds / 60:.1f} min, saved to {args.out_dir / label}", flush=True)


if __name__ == "__main__":
    main()
