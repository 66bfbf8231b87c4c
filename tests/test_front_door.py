"""The engine's front door holds: no module of specroll outside `specroll.engine` reaches into an
engine's parts, its runner, scheduler, drafter or policy (it calls `Engine.load_weights`,
`trainable_head()`, reads `Engine.num_running`, `context_room`, `lm_head_weight()` ...), nor opens the
door named for tests (`Engine.parts_for_testing`), into the target model's layers
(`ModelRunner.input_embeddings`, `lm_head_weight`), or past the `Drafter` protocol into a drafter's
own members (a drafter holding a draft head answers `trainable_head()`), so that any engine, runner or
drafter behind those doors works.

The check reads every module with `ast`. A drafter is recognised by its name (`drafter`, `x.drafter`,
`..._drafter`), the name specroll gives every value typed `Drafter`; an object's own runner
(`self.runner`, a draft model's) is its own business."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specroll.drafting.protocol import Drafter

SPECROLL = Path(__file__).resolve().parents[1] / "specroll"
ENGINE_PARTS = ("runner", "scheduler")  # the engine's own (and any object's): callers use its front door
ENGINE_ONLY_PARTS = ("drafter", "policy", "captured", "stepper", "proposer", "observer")  # of an engine
TEST_SEAM = "parts_for_testing"  # the engine's parts by name, for tests alone
MODEL_PACKAGE = SPECROLL / "model"  # the one place that reads a model's layers


def protocol_members() -> frozenset[str]:
    """What a caller may use of a drafter: the `Drafter` protocol's attributes and methods."""
    names = set(getattr(Drafter, "__annotations__", {}))
    names |= {n for n in vars(Drafter) if not n.startswith("_")}
    return frozenset(names)


def _name(node: ast.expr) -> str:
    """`x` of a name `x` or an attribute `a.x`; '' otherwise."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _is_drafter(node: ast.expr) -> bool:
    name = _name(node)
    return name == "drafter" or name.endswith("_drafter")


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def reach_arounds(source: str, reads_model: bool = False) -> list[str]:
    """Each reach-around in `source`, as 'line: expression'; `reads_model`: the module belongs to
    `specroll.model`, which may read a model's layers."""
    found = []
    members = protocol_members()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if _reaches(node, members, reads_model):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif _is_type_switch(node):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _is_engine(node: ast.expr) -> bool:
    return _name(node).endswith("engine")  # engine, self.engine, loop.engine, rollout.last_engine


def _reaches(node: ast.Attribute, members: frozenset[str], reads_model: bool) -> bool:
    if node.attr.lstrip("_") in ENGINE_PARTS and not _is_self(node.value):
        return True  # engine.runner, loop.engine.scheduler, self.engine._runner ...
    if _is_engine(node.value) and (node.attr.lstrip("_") in ENGINE_ONLY_PARTS or node.attr == TEST_SEAM):
        return True  # engine.drafter, engine._policy, engine.parts_for_testing() ...
    if not reads_model and (
        node.attr == "embed_tokens" or (node.attr == "lm_head" and _name(node.value) == "model")
    ):
        return True  # runner.model.model.embed_tokens, runner.model.lm_head
    return _is_drafter(node.value) and node.attr not in members


def _is_type_switch(node: ast.AST) -> bool:
    """isinstance(drafter, SomeDrafter): a branch on a drafter's class instead of its protocol."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
        and _is_drafter(node.args[0])
        and not (isinstance(node.args[1], ast.Name) and node.args[1].id == "Drafter")
    )


def outside_the_engine() -> list[Path]:
    return sorted(p for p in SPECROLL.rglob("*.py") if (SPECROLL / "engine") not in p.parents)


def test_no_module_outside_the_engine_reaches_around_its_front_door():
    found = [
        f"{path.relative_to(SPECROLL.parent)}:{hit}"
        for path in outside_the_engine()
        for hit in reach_arounds(path.read_text(), MODEL_PACKAGE in path.parents)
    ]
    assert not found, "reach-arounds past the engine's front door or the Drafter protocol:\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    "source",
    [
        "engine.runner.load_weights(weights)",
        "loop.engine.runner.model",
        "running = len(engine.scheduler.running)",
        "room = self.engine.scheduler.context_room",
        "embedding = ctx.target.model.model.embed_tokens.weight",
        "weight = engine.runner.model.lm_head.weight",
        "weight = runner.model.lm_head.weight",
        "model = runner.model; weight = model.lm_head.weight",
        "if isinstance(engine.drafter, DraftHeadDrafter): pass",
        "head = engine.drafter.trainable_head()",
        "cost = self.engine._policy.cost_model",
        "runner = engine.parts_for_testing().runner",
        "engine._runner.forward(inputs)",
        "drafter.listeners.append(recorder)",
        "depth = drafter.head.config.train_depth",
        "copy = self.drafter.trainable_copy()",
        "self.drafter.offer_weights(state)",
        "engine.drafter._offered",
        "draft_drafter._lock",
    ],
)
def test_the_check_finds_each_kind_of_reach_around(source):
    assert reach_arounds(source), source


@pytest.mark.parametrize(
    "source",
    [
        "engine.load_weights(weights); n = engine.num_running + engine.num_waiting",
        "self.runner.forward(inputs); self.runner.cache.num_slots",  # an object's own runner
        "embedding = ctx.target.input_embeddings(); w = engine.lm_head_weight()",
        "head = engine.trainable_head(); engine.warm_drafter(replay)",
        "drafter.begin(info); drafter.propose(queries); drafter.observe(1, []); drafter.finish(1)",
        "drafter.observe_features(f); drafter.advance_step(2); drafter.member(None).upkeep_seconds()",
        "if drafter.needs_features: layers = drafter.feature_layers",
        "self.head.offer_weights(state); self.trainer.head.state_dict()",  # a TrainableHead, a module
        "w = self.lm_head.weight; w = head.lm_head.weight",  # a draft head's own output layer
        "assert isinstance(drafter, Drafter)",
    ],
)
def test_the_check_passes_the_front_doors_and_the_protocol(source):
    assert reach_arounds(source) == []


def test_a_model_module_may_read_its_layers():
    source = "self.lm_head.weight = self.model.embed_tokens.weight"
    assert reach_arounds(source) and reach_arounds(source, reads_model=True) == []
