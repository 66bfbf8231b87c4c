"""Drafters by name. Adding a drafter is one entry here; nothing else branches on its name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from specroll.drafting.combined import CombinedDrafter
from specroll.drafting.grouped import GroupedDrafter
from specroll.drafting.history import HistoryDrafter
from specroll.drafting.own_context import OwnContextDrafter
from specroll.drafting.prompt_lookup import PromptLookupDrafter
from specroll.drafting.suffix_draft import DraftShape
from specroll.drafting.protocol import Drafter
from specroll.engine_config import EngineConfig

if TYPE_CHECKING:
    from specroll.model.runner import ModelRunner


@dataclass(frozen=True)
class DrafterContext:
    """What a drafter may need to be built: the vocabulary, the engine's settings (its device, dtype,
    seed, batch, max_model_len, max_draft, verify mode and sampling rule, which coupled drafters
    follow), a draft checkpoint."""

    vocab_size: int
    engine: EngineConfig = field(default_factory=EngineConfig)
    draft_model_dir: Path | None = None
    draft_head_dir: Path | None = None  # a trained draft head (`specroll head train`)
    target: ModelRunner | None = None  # the target's runner, for a drafter reading its weights (a draft head)


def _draft_model(ctx: DrafterContext, draw: str = "argmax") -> Drafter:
    """A draft model: it draws as `draw` says in exact mode, samples (reporting q) in rejection mode."""
    from specroll.drafting.draft_model import DraftModelDrafter
    from specroll.model.device import torch_dtype

    if ctx.draft_model_dir is None:
        raise ValueError("the draft-model drafter needs a draft checkpoint (--draft-model DIR)")
    engine = ctx.engine
    return DraftModelDrafter.from_pretrained(
        ctx.draft_model_dir,
        engine.max_batch_size,
        engine.cache_capacity,
        draw="sample" if engine.verify == "rejection" else draw,
        seed=engine.seed,
        device=engine.device,
        dtype=torch_dtype(engine.dtype),
        rule=engine.sampling_rule,
    )


def _draft_head(
    ctx: DrafterContext, draw: str = "coupled", with_scores: bool = False, tree: bool = False
) -> Drafter:
    """A draft head on the target's features: coupled draws in exact mode, sampled (with q) in
    rejection. In exact mode it drafts best-first trees of its ranked candidates where the policy
    asks for one, and always with `tree` (chains in rejection mode)."""
    from specroll.drafting.draft_head import DraftHeadDrafter
    from specroll.drafting.draft_tree import TreeShape

    if ctx.draft_head_dir is None or ctx.target is None:
        raise ValueError(
            "the draft-head drafter needs a trained head (--draft-head DIR, `specroll head train`)"
        )
    embedding = ctx.target.input_embeddings()
    engine = ctx.engine
    return DraftHeadDrafter.from_dir(
        ctx.draft_head_dir,
        embedding,
        draw="sample" if engine.verify == "rejection" else draw,
        seed=engine.seed,
        rule=engine.sampling_rule,
        with_scores=with_scores,
        tree=TreeShape() if engine.verify == "exact" else None,
        on_request=not tree,
    )


def _suffix(tree_tokens: int) -> Callable[[DrafterContext], Drafter]:
    """Grouped siblings, a problem's recent training steps and the request's own context, the best
    draft by score per query (Seer §4.4, DAS §4.1)."""

    def build(ctx: DrafterContext) -> Drafter:
        shape = DraftShape(max_tree_tokens=tree_tokens)
        return CombinedDrafter([GroupedDrafter(shape), HistoryDrafter(shape=shape), OwnContextDrafter(shape)])

    return build


def _suffix_chains() -> Drafter:
    """The suffix drafters drafting chains, built where they draft (a module-level function: it
    pickles, to be called in the drafting process of `suffix-ahead`)."""
    return _suffix(0)(DrafterContext(vocab_size=0))


def _suffix_ahead(ctx: DrafterContext) -> Drafter:
    """The suffix drafters in a process of their own, drafting 8-token chains ahead of verification
    (SpecActor §: decoupled drafting; `specroll.drafting.ahead`)."""
    from specroll.drafting.ahead import AheadDrafter

    return AheadDrafter(_suffix_chains, window=8)


def _ladder(ctx: DrafterContext) -> Drafter:
    """The draft ladder's rungs (`specroll.policies.registry.default_ladder`), switched by the policy."""
    from specroll.drafting.switching import SwitchingDrafter

    return SwitchingDrafter({"prompt-lookup": PromptLookupDrafter(), "draft-model": _draft_model(ctx)})


_FACTORIES: dict[str, Callable[[DrafterContext], Drafter]] = {
    "prompt-lookup": lambda ctx: PromptLookupDrafter(),
    "own-context": lambda ctx: OwnContextDrafter(),
    "grouped": lambda ctx: GroupedDrafter(),
    "history": lambda ctx: HistoryDrafter(),
    "suffix": _suffix(0),
    "suffix-tree": _suffix(16),
    "suffix-ahead": _suffix_ahead,
    "draft-model": _draft_model,
    "draft-model-coupled": lambda ctx: _draft_model(ctx, draw="coupled"),
    "ladder": _ladder,
    "draft-head": _draft_head,
    "head+suffix": lambda ctx: CombinedDrafter([_draft_head(ctx, with_scores=True), _suffix(0)(ctx)]),
    "draft-head-argmax": lambda ctx: _draft_head(ctx, draw="argmax"),
    "draft-head-tree": lambda ctx: _draft_head(ctx, tree=True),
}

DEFAULT_DRAFTER = "suffix"


def register(name: str, factory: Callable[[DrafterContext], Drafter]) -> None:
    _FACTORIES[name] = factory


def known_drafters() -> list[str]:
    return sorted(_FACTORIES)


def make_drafter(name: str, context: DrafterContext) -> Drafter:
    if name not in _FACTORIES:
        raise ValueError(f"unknown drafter {name!r}; known drafters: {', '.join(known_drafters())}")
    return _FACTORIES[name](context)
