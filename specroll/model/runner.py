"""Runs the target (or draft) model over a batch of sequences that each add a different number of
new tokens to their cached context: prefill, one-token decode and multi-token verification are all
the same call. Tree-shaped drafts pass each new token's parent; a linear draft is a chain.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

import torch

from specroll.model.config import ModelConfig
from specroll.placement import cache_dtype, check_numerics, invariant_kernels
from specroll.model.kv_cache import KVCache
from specroll.model.loader import load_model, read_config
from specroll.model.attention_chunks import Chunk, plan_chunks
from specroll.model.chain_order import chain_mask, chain_order
from specroll.model.masks import attention_mask
from specroll.model import forward_rows
from specroll.model.static_forward import StaticForwards
from specroll.model.batch_invariant import BLOCK, BatchInvarianceUnavailable, round_up
from specroll.model.transformer import AttentionSpan, CausalLM, ForwardBatch


def batch_invariance_available(model_dir: str | Path, dtype: torch.dtype = torch.float32) -> bool:
    """Whether every linear layer of the checkpoint in `dtype` has a row-count-invariant regime at
    the current thread count (probed on shapes alone: nothing is loaded)."""
    with torch.device("meta"):
        model = CausalLM(read_config(model_dir)).to(dtype)
    try:
        model.use_batch_invariant_numerics()
    except BatchInvarianceUnavailable:
        return False
    return True


@dataclass(frozen=True)
class SequenceInput:
    """One sequence's part of a forward.

    slot:       its KV-cache slot.
    start:      how many of its positions are already cached; the new tokens follow them.
    token_ids:  the new tokens.
    parents:    None for a chain; else parents[i] indexes token i's parent among the new tokens,
                -1 for the cached context. Parents precede children.
    num_logits: how many trailing new tokens need logits (1 for a prefill, all for a verification).
    """

    slot: int
    start: int
    token_ids: Sequence[int]
    parents: Sequence[int] | None = None
    num_logits: int = 1

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError(f"sequence in slot {self.slot} has no new tokens")
        if not 1 <= self.num_logits <= len(self.token_ids):
            raise ValueError(f"num_logits {self.num_logits} outside 1..{len(self.token_ids)}")


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # (B, Tl, V) float32; row b holds its num_logits rows first, then padding
    # (B, Tl, F) the last hidden states (after the final norm, as HF's last_hidden_state) in the first
    # H columns, then the outputs of the model's `feature_layers` if any (a draft head's features)
    hidden: torch.Tensor


class ModelRunner:
    """Runs forwards of `model` over a static KV cache of `num_slots` x `capacity` positions.

    max_attention_chunks: rows are attended in at most this many consecutive chunks, each reading
    only as far as its longest row (`specroll.model.attention_chunks`); 1 reads every row to the
    batch's longest context. A cut is made only if it saves `min_chunk_saving` (512) row-positions.
    batch_invariant: every row's logits are the same bits whatever else the forward holds;
    exact-mode token identity on large vocabularies needs it. Its kernels follow the device
    (`placement.invariant_kernels`: the CPU's probed BLAS, a GPU's Triton kernels); `kernels` names
    them instead ("triton" on a CPU runs them in Triton's interpreter, as the tests do).
    """

    def __init__(
        self,
        model: CausalLM,
        num_slots: int,
        capacity: int,
        batch_invariant: bool = False,
        kernels: str | None = None,
    ) -> None:
        self.model = model
        self.max_attention_chunks = 4  # a draft model's runner takes 1 (`from_pretrained`)
        self.min_chunk_saving = 512  # row-positions a cut must save (tests set 0 to cut wherever it can)
        self.config: ModelConfig = model.config
        self.device = next(model.parameters()).device
        self.batch_invariant = batch_invariant
        self.static: StaticForwards | None = None  # `use_static_forwards`
        check_numerics(self.device.type, batch_invariant)
        default = invariant_kernels(self.device.type, self._dtype_name) if batch_invariant else None
        self.kernels = (kernels or default) if batch_invariant else None
        self.kernels_note = ""  # why specroll's CPU kernels were named and could not run, if so
        model.use_packed_weights()
        if batch_invariant:
            self._use_kernels(model)
        self.use_new_cache(num_slots, capacity)

    def _use_kernels(self, model: CausalLM) -> None:
        """The model on `self.kernels`; specroll's CPU kernels that fail to build here give way to the
        probed BLAS, with the reason in `kernels_note` (and the run's summary)."""
        try:
            model.use_batch_invariant_numerics(self.kernels)
        except RuntimeError as error:
            if self.kernels != "cpu" or isinstance(error, BatchInvarianceUnavailable):
                raise
            self.kernels, self.kernels_note = "probed", str(error)
            model.use_batch_invariant_numerics("probed")

    def use_new_cache(self, num_slots: int, capacity: int, dtype: torch.dtype | None = None) -> None:
        """Forwards from now on read and write a new, zeroed cache of this shape, in `dtype` (by
        default `placement.cache_dtype`'s: fp32 for a 16-bit model under the CPU's batch-invariant
        numerics, else the model's). A training forward takes one each: autograd records a cache's
        writes, so a cache serves one differentiated forward."""
        name = cache_dtype(self.device.type, self._dtype_name, self.kernels == "probed")
        self.cache = KVCache(
            self.config,
            num_slots,
            capacity,
            dtype=dtype or getattr(torch, name),
            device=self.device,
            column_multiple=BLOCK if self.batch_invariant else 1,
        )

    @property
    def _dtype_name(self) -> str:
        """The model's dtype as `placement.DTYPES` names it ("bfloat16")."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def describe_numerics(self) -> str:
        """The precision and kernels forwards run, for a run's summary."""
        dtype = self._dtype_name
        parts = [dtype, f"linear layers on {self.model.linear_kernels}"]
        if dtype != "float32" and self.kernels == "probed":
            parts.append("attention in float32")
        if self.kernels == "cpu":
            parts[1] = "specroll's CPU kernels (linear, attention, norms)"
        if self.kernels_note:
            parts.append(self.kernels_note)
        elif self.kernels == "probed" and dtype == "bfloat16" and self.device.type == "cpu":
            parts.append(_why_not_cpu_kernels())
        return ", ".join(parts)

    def twin(self) -> "ModelRunner":
        """Another runner over this one's model (the same live weights) with its numerics and kernels
        and a one-slot cache of its own (`use_new_cache` sizes it): forwards apart from this runner's
        cache, whose rows equal this runner's to the bit under batch-invariant numerics."""
        return ModelRunner(self.model, 1, 1, self.batch_invariant, self.kernels)

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | Path,
        num_slots: int,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
        max_attention_chunks: int = 4,
        batch_invariant: bool = False,
        config: ModelConfig | None = None,
    ) -> "ModelRunner":
        """`config`: the checkpoint's, where the caller read it already (`EngineSpec.model`)."""
        model = load_model(model_dir, dtype=dtype, device=device, config=config)
        runner = cls(model, num_slots, capacity, batch_invariant)
        runner.max_attention_chunks = max_attention_chunks
        return runner

    @torch.no_grad()
    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy new values into the model's parameters in place: the same tensors, so the cache,
        the batch-invariance probe and anything holding the model stay valid. `weights` uses the
        Hugging Face names (a trainer's `state_dict()`); every parameter must be there, with its
        shape. The K/V cache is left as it is: only requests admitted afterwards see the new weights."""
        params = dict(self.model.named_parameters())
        missing = sorted(set(params) - set(weights))
        if missing:
            raise ValueError(f"weights lack {len(missing)} of the model's parameters, e.g. {missing[:3]}")
        wrong = [
            f"{name} {tuple(weights[name].shape)} != {tuple(p.shape)}"
            for name, p in params.items()
            if weights[name].shape != p.shape
        ]
        if wrong:
            raise ValueError(f"weights of the wrong shape: {wrong[:3]}")
        for name, param in params.items():
            param.copy_(weights[name])

    def input_embeddings(self) -> torch.Tensor:
        """(V, H) the model's input embeddings, the live tensor (a draft head reads the target's)."""
        return self.model.model.embed_tokens.weight

    def lm_head_weight(self) -> torch.Tensor:
        """(V, H) the model's output layer, the live tensor (the same as `input_embeddings` where tied)."""
        return self.model.lm_head.weight

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's weights by their Hugging Face names (`load_weights` takes the same)."""
        return self.model.state_dict()

    def recorded_graphs(self) -> tuple[int, float]:
        """CUDA graphs recorded so far by the static forwards, and the seconds that took."""
        if self.static is None:
            return 0, 0.0
        return self.static.replayer.num_graphs, self.static.replayer.recording_seconds

    def use_static_forwards(self, max_width: int) -> None:
        """Run every forward of at most `max_width` new tokens a row (decode, verification) at a
        bucketed static shape: recorded as a CUDA graph on CUDA, eager elsewhere with the same
        results (`specroll.model.static_forward`). Longer forwards (prefills) stay dynamic."""
        self.static = StaticForwards(self.model, self.cache, max_width, BLOCK, trees=not self.batch_invariant)

    def use_feature_layers(self, layers: tuple[int, ...]) -> None:
        """Every forward's `hidden` also carries these decoder layers' outputs (a draft head's fused
        features, `CausalLM.use_feature_layers`); chosen before the first recorded forward."""
        if tuple(layers) == self.model.feature_layers:
            return
        if self.static is not None and self.static.replayer.num_graphs:
            raise RuntimeError("feature layers must be chosen before any forward is recorded")
        self.model.use_feature_layers(layers)

    @torch.inference_mode()
    def forward(self, sequences: Sequence[SequenceInput]) -> ForwardOutput:
        if self.static is not None and self.static.fits(sequences):
            self.check(sequences)
            hidden = self.static.features(sequences)
            return ForwardOutput(self.model.logits(hidden).float(), hidden)
        logits, hidden = self.model(self.prepare(sequences), self.cache)
        return ForwardOutput(logits.float(), hidden)

    def prepare(self, sequences: Sequence[SequenceInput]) -> ForwardBatch:
        """The forward's inputs, built on the model's device from the host's integers: nothing is
        read back from the device (no synchronisation), and one packed array crosses to it
        (`forward_rows`: row i is the i-th sequence, as wide as the widest)."""
        self.check(sequences)
        starts = [s.start for s in sequences]
        ends = [s.start + len(s.token_ids) for s in sequences]
        T = max(len(s.token_ids) for s in sequences)
        is_tree = any(s.parents is not None for s in sequences)
        host = forward_rows.pack(sequences, range(len(sequences)), len(sequences), T, is_tree)
        rows = forward_rows.unpack(torch.from_numpy(host).to(self.device), T)
        slot_list = [s.slot for s in sequences]
        spans = [
            self._span(chunk, slot_list, rows, T)
            for chunk in plan_chunks(ends, self.max_attention_chunks, self.min_chunk_saving)
        ]
        Tl = max(s.num_logits for s in sequences)
        slots = torch.tensor(slot_list, device=self.device)
        batch = forward_rows.forward_batch(rows, self.cache, slots, spans, max(starts) + T, Tl)
        return replace(
            batch,
            live_tokens=self._live_rows(sequences, T, lambda s: len(s.token_ids)),
            live_logits=self._live_rows(sequences, Tl),
        )

    def _live_rows(
        self, sequences: Sequence[SequenceInput], width: int, used=lambda s: s.num_logits
    ) -> torch.Tensor | None:
        """The flat indices of the (rows, width) positions each sequence uses (`used`: its logit rows,
        or `len`: its tokens), where some row is padded and the model skips padding
        (`CausalLM.skips_padding`); else None."""
        counts = [used(s) for s in sequences]
        if not self.model.skips_padding or all(n == width for n in counts):
            return None
        live = [r * width + t for r, n in enumerate(counts) for t in range(n)]
        return torch.tensor(live, dtype=torch.long, device=self.device)

    def _span(self, chunk: Chunk, slots: list[int], rows: forward_rows.Rows, T: int) -> AttentionSpan:
        """Rows `chunk` of the forward, reading as far as its longest row; a tree forward's rows
        carry their relation: with batch-invariant numerics its nodes then read their keys in chain
        order."""
        span = slice(chunk.first, chunk.end)
        read_length = round_up(chunk.read_length) if self.batch_invariant else chunk.read_length
        start, num_new, depth = rows.start[span], rows.num_new[span], rows.depth[span]
        order = None
        if rows.relation is None:
            mask = _chain_mask(start, num_new, T, read_length)
        elif self.batch_invariant:
            order = chain_order(start, depth, rows.relation[span], read_length)
            mask = chain_mask(start, depth, read_length)
        else:
            mask = attention_mask(start, num_new, rows.relation[span], read_length)
        chunk_slots = slots[span]
        return AttentionSpan(
            span,
            _as_slice(chunk_slots) or torch.tensor(chunk_slots, device=self.device),
            mask,
            read_length,
            order,
        )

    def check(self, sequences: Sequence[SequenceInput]) -> None:
        """A clear error for a forward this runner cannot run (slots, cache capacity, token ids)."""
        if not sequences:
            raise ValueError("a forward needs at least one sequence")
        vocab = self.config.vocab_size
        for s in sequences:
            if not 0 <= s.slot < self.cache.num_slots:
                raise ValueError(f"slot {s.slot} outside 0..{self.cache.num_slots - 1}")
            if s.start + len(s.token_ids) > self.cache.capacity:
                raise ValueError(
                    f"slot {s.slot}: {s.start + len(s.token_ids)} positions exceed the "
                    f"cache capacity {self.cache.capacity}"
                )
            if min(s.token_ids) < 0 or max(s.token_ids) >= vocab:
                raise ValueError(f"slot {s.slot}: token ids outside the vocabulary 0..{vocab - 1}")


def _why_not_cpu_kernels() -> str:
    """Why exact bf16 runs the probed BLAS here rather than specroll's CPU kernels, in a few words."""
    from specroll.cpu_kernels.build import missing_requirement
    from specroll.placement import cpu_kernels_wanted

    if not cpu_kernels_wanted():
        return "specroll's CPU kernels declined (SPECROLL_CPU_KERNELS=off)"
    return f"specroll's CPU kernels unused: {missing_requirement() or 'asked for the probed BLAS'}"


def _chain_mask(start: torch.Tensor, num_new: torch.Tensor, T: int, read_length: int) -> torch.Tensor:
    """(B, 1, T, L) for chains: query t sees every cached position and the new tokens up to itself.
    A padded query (t >= num_new) sees what the last real one sees, so its softmax stays finite."""
    device = start.device
    last_seen = start[:, None] + torch.minimum(
        torch.arange(T, device=device)[None], num_new[:, None] - 1
    )  # (B, T)
    return (torch.arange(read_length, device=device)[None, None] <= last_seen[:, :, None])[:, None]


def _as_slice(slots: list[int]) -> slice | None:
    """Consecutive ascending slots read the cache as a view instead of a gathered copy."""
    if slots == list(range(slots[0], slots[0] + len(slots))):
        return slice(slots[0], slots[0] + len(slots))
    return None
