"""The draft head: a small network that continues the target's own computation by a few tokens.

EAGLE (Li et al. 2024) drafts from the target's features rather than from tokens alone: given the
final hidden state h_t the target computed at position t (the one its logits for token t+1 came
from) and the embedding of the token x_{t+1} actually drawn there, the head predicts h_{t+1}, whose
logits give the distribution of x_{t+2}. Fed its own prediction and the drafted token, it goes on
for as many tokens as the draft needs. The verification forward computed h_t already, so a draft
costs no extra target forward (TLT §4 trains such a one-layer drafter on idle workers).

The final hidden state is shaped to give token t+1's distribution and keeps less of what the tokens
after it depend on; as EAGLE-3 does, the head may also read the outputs of a few of the target's
earlier decoder layers at position t (`feature_layers`, which the target then appends to its forwards'
features): each is RMS-normalised and one linear layer reduces them, with the final hidden state, to
the head's first input feature (`first_feature`). Deeper steps read the head's own predictions.

This head is attention-free (choose it over EAGLE's decoder layer because h_t already summarises the
context, and a chain of a few tokens needs no cache): the feature and the embedding, each
RMS-normalised, are fused by one linear layer, refined by `num_blocks` residual SwiGLU blocks and
normalised as the target's final norm leaves its hidden states. Its output layer covers a *draft
vocabulary*, the `draft_vocab_size` tokens a policy's responses use most, in ascending target id
(`draft_to_target`), initialised from the target's own output rows: a draft token outside it is never
proposed, which costs acceptance only where such tokens are drawn, and the output layer costs a
fraction of the full vocabulary's. The target's embedding table is read, never stored or trained.

Saved as `config.json` + `model.safetensors` in a directory (`save` / `load`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from specroll.drafting.head_files import CONFIG_FILE, FORMAT, WEIGHTS_FILE, read_head_config
from specroll.model.transformer import checked_feature_layers


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int  # the target's
    vocab_size: int  # the target's full vocabulary
    draft_vocab_size: int  # the head's output tokens
    intermediate_size: int = 1536
    num_blocks: int = 2
    rms_norm_eps: float = 1e-5
    target: str = ""  # the checkpoint it was trained for (its directory name), for messages
    feature_layers: tuple[int, ...] = ()  # the target's decoder layers fused into the first feature
    train_depth: int = 3  # draft tokens its training unrolled; online updates unroll as many

    def __post_init__(self) -> None:
        object.__setattr__(self, "feature_layers", checked_feature_layers(self.feature_layers))
        if not 0 < self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size {self.draft_vocab_size} outside 1..{self.vocab_size}")
        if min(self.hidden_size, self.intermediate_size, self.num_blocks, self.train_depth) <= 0:
            raise ValueError("hidden_size, intermediate_size, num_blocks and train_depth must be positive")


def default_feature_layers(num_layers: int) -> tuple[int, ...]:
    """A low and a middle decoder layer (EAGLE-3 fuses a low, a middle and a high one; the final
    hidden state is the high one here), or none for a target of fewer than four layers."""
    if num_layers < 4:
        return ()
    return tuple(sorted({1, num_layers // 2 - 1}))


class _Block(nn.Module):
    """x + SwiGLU(RMSNorm(x))."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gate = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _normed(self.norm, x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def _normed(norm: nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """`norm(x)` with x in the norm's dtype: under bf16 autocast the linear layers hand on bf16, and a
    norm of fp32 weights would take torch's slower mixed-dtype path."""
    return norm(x.to(norm.weight.dtype))


class DraftHead(nn.Module):
    """first_feature(target features (N, F)) -> (N, H); step(feature (N, H), embedding (N, H)) -> next
    feature (N, H); logits(feature) -> (N, Vd)."""

    def __init__(self, config: HeadConfig, draft_to_target: torch.Tensor) -> None:
        super().__init__()
        if draft_to_target.shape != (config.draft_vocab_size,):
            raise ValueError(
                f"draft_to_target has shape {tuple(draft_to_target.shape)}, "
                f"expected ({config.draft_vocab_size},)"
            )
        self.config = config
        H = config.hidden_size
        self.feature_norm = nn.RMSNorm(H, eps=config.rms_norm_eps)
        self.embedding_norm = nn.RMSNorm(H, eps=config.rms_norm_eps)
        self.fuse = nn.Linear(2 * H, H, bias=False)
        self.num_feature_chunks = 1 + len(config.feature_layers)
        if config.feature_layers:
            self.reduce = nn.Linear(self.num_feature_chunks * H, H, bias=False)
            with torch.no_grad():  # start from the final hidden state alone, the others' share small
                self.reduce.weight.mul_(0.1)[:, :H] += torch.eye(H)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.num_blocks))
        self.norm = nn.RMSNorm(H, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(H, config.draft_vocab_size, bias=False)
        self.register_buffer("draft_to_target", draft_to_target.long(), persistent=True)

    @property
    def feature_width(self) -> int:
        """F: the width of the target features the head reads (the final hidden state and its layers)."""
        return self.num_feature_chunks * self.config.hidden_size

    def first_feature(self, target_features: torch.Tensor) -> torch.Tensor:
        """(..., F) target features -> (..., H) the first step's input feature."""
        if target_features.shape[-1] != self.feature_width:
            raise ValueError(
                f"the draft head reads {self.feature_width} feature columns (the final hidden state and "
                f"layers {list(self.config.feature_layers)}), got {target_features.shape[-1]}"
            )
        if not self.config.feature_layers:
            return target_features
        chunks = target_features.unflatten(-1, (self.num_feature_chunks, self.config.hidden_size))
        scale = torch.rsqrt(chunks.float().pow(2).mean(-1, keepdim=True) + self.config.rms_norm_eps)
        return self.reduce((chunks * scale.to(chunks.dtype)).flatten(-2))

    def step(self, feature: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        normed = [_normed(self.feature_norm, feature), _normed(self.embedding_norm, embedding)]
        x = self.fuse(torch.cat(normed, -1))
        for block in self.blocks:
            x = block(x)
        return _normed(self.norm, x)

    def logits(self, feature: torch.Tensor) -> torch.Tensor:
        return self.lm_head(feature)

    def target_to_draft(self) -> torch.Tensor:
        """(V,) long: each target token's index in the draft vocabulary, -1 outside it."""
        inverse = torch.full(
            (self.config.vocab_size,), -1, dtype=torch.long, device=self.draft_to_target.device
        )
        inverse[self.draft_to_target] = torch.arange(self.config.draft_vocab_size, device=inverse.device)
        return inverse

    def init_from_target(self, lm_head_weight: torch.Tensor) -> None:
        """Start the output layer at the target's rows for the draft vocabulary."""
        with torch.no_grad():
            self.lm_head.weight.copy_(lm_head_weight[self.draft_to_target.to(lm_head_weight.device)])

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {name: t.detach().cpu().contiguous() for name, t in self.state_dict().items()}
        save_file(state, str(directory / WEIGHTS_FILE))
        (directory / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, **asdict(self.config)}, indent=2))
        return directory


def load_head(directory: str | Path, device: str | torch.device = "cpu") -> DraftHead:
    """The head saved in `directory`; a clear error if it is not one."""
    directory = Path(directory)
    fields = read_head_config(directory)
    if fields is None:
        raise FileNotFoundError(f"{directory} holds no draft head ({CONFIG_FILE} with format {FORMAT!r})")
    fields = {k: v for k, v in fields.items() if k != "format"}
    config = HeadConfig(**fields)  # a head saved before `feature_layers` reads the final state alone
    state = load_file(str(directory / WEIGHTS_FILE))
    head = DraftHead(config, state["draft_to_target"])
    head.load_state_dict(state)
    return head.to(device).eval()


def check_compatible(head: DraftHead, hidden_size: int, vocab_size: int, where: str) -> None:
    config = head.config
    if (config.hidden_size, config.vocab_size) != (hidden_size, vocab_size):
        raise ValueError(
            f"draft head {where} was trained for hidden size {config.hidden_size} and vocabulary "
            f"{config.vocab_size} ({config.target or 'another model'}); this target has {hidden_size} "
            f"and {vocab_size}"
        )
