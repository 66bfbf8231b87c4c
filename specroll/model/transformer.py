"""A decoder-only transformer covering Llama 3, Qwen2/2.5 (qkv bias) and Qwen3 (q/k RMSNorm).

Parameter names follow the Hugging Face checkpoints, so a state dict loads as it is. The model
reads and writes a `KVCache` described by a `ForwardBatch`; it knows nothing of requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from specroll.model.batch_invariant import (
    BatchInvarianceUnavailable,
    block_attention,
    invariant_query_rows,
    invariant_row_sizes,
    padded_rows,
)
from specroll.model import packed_linear
from specroll.model.cpu_attention import attention_backends
from specroll.model.chain_order import ChainOrder
from specroll.model.config import ModelConfig
from specroll.model.kv_cache import KVCache
from specroll.model.rope import RotaryTable, apply_rotary, inverse_frequencies


@dataclass
class AttentionSpan:
    """Rows `rows` of the batch attend together, each reading the first `read_length` positions of
    its cache slot (see `specroll.model.attention_chunks`)."""

    rows: slice
    slots: torch.Tensor | slice  # (b,) their cache slots, or a slice of consecutive slots
    attn_mask: torch.Tensor  # (b, 1, T, L) True where a query may attend to a key
    read_length: int  # L
    order: ChainOrder | None = None  # trees under batch-invariant numerics: keys read in chain order


@dataclass
class ForwardBatch:
    """Everything one forward needs; built by `ModelRunner.prepare`."""

    write_index: torch.Tensor  # (B*Hkv*T,) flat cache row of each new token's K/V (`KVCache.write_index`)
    input_ids: torch.Tensor  # (B, T) new tokens, padded
    positions: torch.Tensor  # (B, T) rope positions of the new tokens
    num_positions: int  # every position is below this (known on the host: no device read)
    spans: list[AttentionSpan]  # consecutive row ranges covering the batch, in order
    logit_index: torch.Tensor  # (B, Tl) which of the T new tokens produce logits
    # the flat (B*T) indices of the new tokens that are no padding, where some row is padded and the
    # MLP's kernels give a row the same bits however many rows they take (`ModelRunner.prepare`);
    # None: every token goes through every layer
    live_tokens: torch.Tensor | None = None
    live_logits: torch.Tensor | None = None  # the same for the (B*Tl) logit rows


class Linear(nn.Linear):
    """nn.Linear that, given `row_sizes`, makes every call with one of those row counts so that each
    row's result is the same bits whatever the batch (`specroll.model.batch_invariant`); given
    `kernel`, runs it instead (a GPU's batch-invariant matmul, `specroll.kernels.linear`); with
    `packs`, multiplies on its weight packed for oneDNN (`specroll.model.packed_linear`), repacked
    whenever the weight has changed since, and through `F.linear` where a gradient is asked for."""

    row_sizes: tuple[int, ...] = ()
    kernel: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor] | None = None
    packs: bool = False
    _packed: tuple[torch.Tensor, int, torch.Tensor] | None = None  # (weight, its version, packed copy)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, self.weight, self.bias)
        if self.row_sizes:
            return padded_rows(x, self._matmul, self.row_sizes)
        return self._matmul(x)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if not self.packs or (weight.requires_grad and torch.is_grad_enabled()):
            return F.linear(x, weight, self.bias)
        return packed_linear.linear(x, self._packed_weight(weight), self.bias)

    def _packed_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """The packed copy of `weight` as it is now: packed again after an in-place update (new
        weights, `ModelRunner.load_weights`) or where another tensor stands in for it."""
        if self._packed is None or self._packed[0] is not weight or self._packed[1] != weight._version:
            self._packed = (weight, weight._version, packed_linear.pack(weight))
        return self._packed[2]


class RMSNorm(nn.Module):
    kernel: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None  # a GPU's row kernel
    add_kernel: Callable | None = None  # a GPU's residual add and norm in one (`kernels.add_rms_norm`)

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)

    def add_and_norm(self, x: torch.Tensor, update: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + update, the norm of it), in one kernel given `add_kernel`; no update: (x, the norm of x)."""
        if update is None:
            return x, self(x)
        if self.add_kernel is not None:
            return self.add_kernel(x, update, self.weight, self.eps)
        x = x + update
        return x, self(x)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over x's last dimension with `weight` in torch's own kernels."""
    if x.dtype == torch.float32:  # one fused kernel; the same arithmetic as below
        return F.rms_norm(x, weight.shape, weight, eps)
    dtype = x.dtype  # as Hugging Face: normalise in float32, scale in the model's dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_heads, self.num_kv_heads, self.head_dim = (
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
        )
        bias = config.has_qkv_bias
        self.q_proj = Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        if config.has_qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.has_qk_norm = config.has_qk_norm
        self.invariant_rows = 0  # > 0: batch-invariant block attention with at least this many query rows
        self.kernel: Callable | None = None  # a GPU's invariant attention (`specroll.kernels.attention`)
        self.rotary_kernel: Callable | None = None  # q's and k's rotary in one (`kernels.rotary`)
        # without gradients: q, k and v in one call (`cpu_kernels.ops.ConcatenatedLinear`), then rotary
        # and the cache write in one (`cpu_kernels.ops.rotary_write`): the same bits as the path below
        self.qkv_kernel: Callable | None = None
        self.rotary_write_kernel: Callable | None = None

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], cache: KVCache, batch: ForwardBatch
    ) -> torch.Tensor:
        B, T, _ = x.shape
        if self.qkv_kernel is not None and not torch.is_grad_enabled():
            keys, values = cache.keys[self.layer], cache.values[self.layer]
            if keys.dtype == x.dtype:
                q = self.rotary_write_kernel(
                    self.qkv_kernel(x),
                    rope,
                    keys,
                    values,
                    batch.write_index,
                    self.num_heads,
                    self.num_kv_heads,
                )
                return self._attend_spans(q, cache, batch)
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        if self.has_qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self._rotate(q.transpose(1, 2), k.transpose(1, 2), rope)  # (B, H, T, D), (B, Hkv, T, D)
        cache.write(self.layer, batch.write_index, k, v)
        return self._attend_spans(q, cache, batch)

    def _attend_spans(self, q: torch.Tensor, cache: KVCache, batch: ForwardBatch) -> torch.Tensor:
        """q (B, H, T, D) over each span's keys, through the output projection -> (B, T, hidden)."""
        B, _, T, _ = q.shape
        if len(batch.spans) == 1:
            out = self._attend(q, cache, batch.spans[0])
        else:
            out = torch.cat([self._attend(q[span.rows], cache, span) for span in batch.spans])
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))

    def _rotate(
        self, q: torch.Tensor, k: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rotary_kernel is not None:
            return self.rotary_kernel(q, k, *rope)
        return apply_rotary(q, *rope), apply_rotary(k, *rope)

    def _attend(self, q: torch.Tensor, cache: KVCache, span: AttentionSpan) -> torch.Tensor:
        """q (b, H, T, D) -> (b, H, T, D) over the span's cached keys and values."""
        keys, values = cache.read(self.layer, span.slots, span.read_length)  # (b, Hkv, L, D)
        if self.kernel is not None:
            columns = None if span.order is None else span.order.columns
            return self.kernel(q, keys, values, span.attn_mask, columns)
        if self.invariant_rows:
            return block_attention(q, keys, values, span.attn_mask, self.invariant_rows, span.order)
        return grouped_attention(q, keys, values, span.attn_mask)


def grouped_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """q (b, H, T, D); keys, values (b, Hkv, L, D); mask (b, 1, T, L) -> (b, H, T, D).

    The G = H / Hkv query heads that share a key head, and their T tokens, go in as G*T queries of
    that head: each key and value is read once for all of them, a mask needs no expanded heads, and
    the fused kernels that take a mask run (PyTorch's `enable_gqa` falls back to its math kernel
    when given one)."""
    b, H, T, D = q.shape
    Hkv, L = keys.shape[1], keys.shape[2]
    G = H // Hkv
    queries = q.reshape(b, Hkv, G * T, D)  # query head h = kv head h // G, as Hugging Face's repeat_kv
    grouped_mask = mask[:, :, None].expand(b, 1, G, T, L).reshape(b, 1, G * T, L)
    with attention_backends(queries):
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=grouped_mask)
    return out.reshape(b, H, T, D)


class MLP(nn.Module):
    kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None  # SiLU(gate) * up in one
    # without gradients: gate and up in one call, then SiLU(gate) * up of its halves (the same bits)
    gate_up_kernel: Callable[[torch.Tensor], torch.Tensor] | None = None
    halves_kernel: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_kernel is not None and not torch.is_grad_enabled():
            return self.down_proj(self.halves_kernel(self.gate_up_kernel(x)))
        if self.kernel is not None:
            return self.down_proj(self.kernel(self.gate_proj(x), self.up_proj(x)))
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, rope, cache, batch):
        x = x + self.self_attn(self.input_layernorm(x), rope, cache, batch)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_fused(
        self, x: torch.Tensor, update: torch.Tensor | None, rope, cache: KVCache, batch: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer with each residual add inside the norm that reads it: its input is x + update
        (update: the previous layer's MLP output, not yet added; None for the first layer), its output
        residual + mlp, left for the next norm to add -> (input, residual, mlp), each (B, T, H)."""
        x, h = self.input_layernorm.add_and_norm(x, update)
        residual, h = self.post_attention_layernorm.add_and_norm(x, self.self_attn(h, rope, cache, batch))
        return x, residual, self._mlp_of_live(h, batch.live_tokens)

    def _mlp_of_live(self, h: torch.Tensor, live: torch.Tensor | None) -> torch.Tensor:
        """The MLP of the tokens `live` names (all without it); a padding token's is zero. A padding
        token's state reaches only its own position (its K/V go to the cache's scratch column and its
        logits are never read), so a draft one row makes does not cost every row its width."""
        if live is None:
            return self.mlp(h)
        flat = h.reshape(-1, h.shape[-1])
        out = self.mlp(flat.index_select(0, live))
        return flat.new_zeros(flat.shape[0], out.shape[-1]).index_copy_(0, live, out).view(*h.shape[:-1], -1)


class Backbone(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


def _probed_row_sizes(linear: Linear, threads: int) -> tuple[int, ...]:
    """The call sizes `linear` serves (`invariant_row_sizes`) on its own kernel, dtype and bias; a
    packed layer whose packed calls serve no size runs `F.linear` instead."""
    shape = (linear.in_features, linear.out_features, threads, linear.weight.dtype, linear.bias is not None)
    if linear.packs:
        try:
            return invariant_row_sizes(*shape, packed=True)
        except BatchInvarianceUnavailable:
            linear.packs = False
    return invariant_row_sizes(*shape)


def checked_feature_layers(layers, num_layers: int | None = None) -> tuple[int, ...]:
    """`layers` as a tuple of decoder layer numbers, which must be distinct, ascending, >= 0 and,
    given the target's `num_layers`, below it; else a ValueError naming them."""
    layers = tuple(int(i) for i in layers)
    top = float("inf") if num_layers is None else num_layers
    if list(layers) != sorted(set(layers)) or any(not 0 <= i < top for i in layers):
        within = "" if num_layers is None else f" and within 0..{num_layers - 1}"
        raise ValueError(f"feature layers {list(layers)} must be distinct, ascending, >= 0{within}")
    return layers


class CausalLM(nn.Module):
    """forward(batch, cache) -> (logits (B, Tl, V), features (B, Tl, F)): the hidden states after the
    final norm (what the LM head reads, the first H columns), followed by the outputs of the decoder
    layers named in `feature_layers` (none by default, F = H), which EAGLE-style drafters condition on."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = RotaryTable(inverse_frequencies(config.rope, config.head_dim))
        self.feature_layers: tuple[int, ...] = ()  # set through `use_feature_layers`
        self.fuses_residual_adds = False  # `use_triton_kernels`: layers run `forward_fused`
        # the MLP runs on the tokens that are no padding (`ForwardBatch.live_tokens`): its kernels give
        # a row the same bits whatever the rows beside it (`use_cpu_kernels`)
        self.skips_padding = False

    def use_batch_invariant_numerics(self, kernels: str = "probed") -> None:
        """Make every row's result independent of the forward's shape; the runner that owns the model
        calls this once, before any forward. `kernels` (`invariant_kernels`): "probed", the CPU's
        BLAS at call sizes probed at the current thread count (`batch_invariant`; raises
        `BatchInvarianceUnavailable` where it allows none), "cpu", specroll's own CPU kernels for bf16
        (`specroll.cpu_kernels`), or "triton", a GPU's kernels with fixed reduction orders
        (`specroll.kernels`)."""
        if kernels == "triton":
            self.use_triton_kernels()
            return
        if kernels == "cpu":
            self.use_cpu_kernels()
            return
        if kernels != "probed":
            raise ValueError(f"batch-invariant kernels are 'probed', 'cpu' or 'triton', got {kernels!r}")
        threads = torch.get_num_threads()
        for linear in (m for m in self.modules() if isinstance(m, Linear)):
            linear.row_sizes = _probed_row_sizes(linear, threads)
        query_rows = invariant_query_rows(self.config.head_dim, threads)
        for module in self.modules():
            if isinstance(module, Attention):
                module.invariant_rows = query_rows

    def use_packed_weights(self) -> None:
        """Every linear layer multiplies on its weight packed for oneDNN where torch packs its dtype
        on its device (`packed_linear.can_pack`: bf16 on a CPU with AVX-512 or AMX); elsewhere
        nothing changes. Before `use_batch_invariant_numerics`, whose probe then covers the packed
        kernel (and unpacks a layer whose packed calls it cannot serve)."""
        for linear in (m for m in self.modules() if isinstance(m, Linear)):
            linear.packs = packed_linear.can_pack(linear.weight.dtype, linear.weight.device.type)

    @property
    def linear_kernels(self) -> str:
        """What the linear layers run on, for a run's summary."""
        linears = [m for m in self.modules() if isinstance(m, Linear)]
        if any(type(m.kernel).__name__ == "PackedLinear" for m in linears):
            return "specroll's CPU kernels"
        if any(m.kernel is not None for m in linears):
            return "Triton kernels"
        packs = {m.packs for m in linears}
        names = {frozenset({True}): "oneDNN packed weights", frozenset({False}): "torch's F.linear"}
        return names.get(frozenset(packs), "oneDNN packed weights and torch's F.linear")

    def use_triton_kernels(self, fused: bool = True) -> None:
        """A GPU's batch-invariant kernels (`specroll.kernels`) for every linear layer, norm and
        attention, and, `fused`, for the elementwise work between them: rotary, SiLU(gate) * up and
        each residual add inside the norm after it (`DecoderLayer.forward_fused`), fewer launches a
        layer. Unfused, that work runs in torch: the reference the fused forward is compared with,
        the same bits but for SiLU's (an exp is each library's own)."""
        from specroll.kernels.add_rms_norm import invariant_add_rms_norm
        from specroll.kernels.attention import invariant_attention
        from specroll.kernels.linear import invariant_linear
        from specroll.kernels.rms_norm import invariant_rms_norm
        from specroll.kernels.rotary import invariant_rotary
        from specroll.kernels.silu_mul import invariant_silu_mul

        kernels = {
            (Linear, "kernel"): invariant_linear,
            (RMSNorm, "kernel"): invariant_rms_norm,
            (Attention, "kernel"): invariant_attention,
        }
        elementwise = {
            (RMSNorm, "add_kernel"): invariant_add_rms_norm,
            (Attention, "rotary_kernel"): invariant_rotary,
            (MLP, "kernel"): invariant_silu_mul,
        }
        kernels.update({key: kernel if fused else None for key, kernel in elementwise.items()})
        self._install_kernels(kernels)
        self.fuses_residual_adds = fused

    def use_cpu_kernels(self) -> None:
        """specroll's CPU kernels (`specroll.cpu_kernels`, bf16, AVX-512) for every linear layer (each
        on its own packed weight), norm, residual add with the norm after it, attention and
        SiLU(gate) * up: each row's bits its own by construction. Without gradients (the engine), q, k
        and v are one call on their weights packed side by side, followed by one kernel for rotary and
        the cache write, and gate and up one call; a training forward runs each layer alone and rotary
        in torch, the same bits (tests/cpu_kernels). A RuntimeError where they cannot run
        (`cpu_kernels.ops.module`)."""
        from specroll.cpu_kernels import ops

        ops.module()
        self._install_kernels(
            {
                (RMSNorm, "kernel"): ops.rms_norm,
                (RMSNorm, "add_kernel"): ops.add_rms_norm,
                (Attention, "kernel"): ops.attention,
                (MLP, "kernel"): ops.silu_mul,
            }
        )
        for linear in (m for m in self.modules() if isinstance(m, Linear)):
            linear.kernel, linear.packs = ops.PackedLinear(), False
        for module in self.modules():
            if isinstance(module, MLP):
                module.gate_up_kernel = ops.ConcatenatedLinear(module.gate_proj, module.up_proj)
                module.halves_kernel = ops.silu_mul_halves
            if isinstance(module, Attention) and not module.has_qk_norm and module.head_dim % 32 == 0:
                module.qkv_kernel = ops.ConcatenatedLinear(module.q_proj, module.k_proj, module.v_proj)
                module.rotary_write_kernel = ops.rotary_write
        self.fuses_residual_adds = True
        self.skips_padding = True

    def _install_kernels(self, kernels: dict) -> None:
        """Set each (module type, attribute) of `kernels` on every module of exactly that type."""
        for module in self.modules():
            for (kind, attribute), kernel in kernels.items():
                if type(module) is kind:
                    setattr(module, attribute, kernel)

    def use_feature_layers(self, layers: tuple[int, ...]) -> None:
        """Append these decoder layers' outputs (ascending, distinct) to every forward's features, as
        a draft head that fuses them asks (EAGLE-3); () for the final hidden states alone."""
        self.feature_layers = checked_feature_layers(layers, self.config.num_layers)

    def forward(self, batch: ForwardBatch, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.features(batch, cache)
        if batch.live_logits is None:
            return self.logits(features), features
        flat = features.reshape(-1, features.shape[-1])
        live = self.logits(flat.index_select(0, batch.live_logits))
        logits = live.new_zeros(flat.shape[0], live.shape[-1]).index_copy_(0, batch.live_logits, live)
        return logits.view(*features.shape[:-1], -1), features  # a padding row's logits are zero

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """The LM head on the final hidden states, the first H columns of `features`."""
        return self.lm_head(features[..., : self.config.hidden_size])

    def features(self, batch: ForwardBatch, cache: KVCache) -> torch.Tensor:
        """The features (B, Tl, F) of the rows `batch.logit_index` names: the final-norm hidden states
        and the outputs of `feature_layers`; everything up to the LM head, the part a captured forward
        replays."""
        x = self.model.embed_tokens(batch.input_ids)  # (B, T, H)
        cos, sin = self.rotary(batch.positions, batch.num_positions)
        rope = (cos.to(x.dtype), sin.to(x.dtype))
        index = batch.logit_index[..., None].expand(-1, -1, x.shape[-1])
        if self.fuses_residual_adds:
            return self._fused_features(x, rope, cache, batch, index)
        captured = []
        for number, layer in enumerate(self.model.layers):
            x = layer(x, rope, cache, batch)
            if number in self.feature_layers:
                captured.append(torch.gather(x, 1, index))
        hidden = self.model.norm(torch.gather(x, 1, index))  # (B, Tl, H)
        return torch.cat([hidden, *captured], -1) if captured else hidden

    def _fused_features(self, x, rope, cache: KVCache, batch: ForwardBatch, index) -> torch.Tensor:
        """`features` through `DecoderLayer.forward_fused`: layer i's output is formed by layer i+1's
        input norm, and the last layer's by the final norm after the gather (an elementwise add
        commutes with it: the same bits, on the Tl rows alone)."""
        captured, update = [], None
        for number, layer in enumerate(self.model.layers):
            entering, x, update = layer.forward_fused(x, update, rope, cache, batch)
            if number - 1 in self.feature_layers:
                captured.append(torch.gather(entering, 1, index))
        last, hidden = self.model.norm.add_and_norm(torch.gather(x, 1, index), torch.gather(update, 1, index))
        if self.config.num_layers - 1 in self.feature_layers:
            captured.append(last)
        return torch.cat([hidden, *captured], -1) if captured else hidden  # (B, Tl, F)
