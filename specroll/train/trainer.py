"""`specroll train`: GRPO whose rollouts run on one specroll engine kept for the whole run.

Each step: the schedule names the step's problems; the engine moves to the step (history drafters
take the previous steps' responses) and rolls out n responses per problem; the task scores them; one
AdamW step on the GRPO objective (`specroll.train.grpo`) updates the trainer's copy of the policy
(specroll's own model, run with the engine's numerics: `specroll.train.policy_forward`, so before the
update every token's importance ratio is exactly 1); its new weights are copied into the running
engine in place. Drafters, their indexes and the cost model carry over from step to step.

In exact mode a rollout's tokens are a function of (seed, request id, position) and the weights, so
speculation changes no token, no reward and no gradient: `--speculate on` and `off` give the same
weights, step by step (`weights_sha256`). `shadow_plain` measures that live: every step also runs the
plain rollout on a second engine and records its time and whether it matched.

A run can stop and go on: `state()` is everything its future depends on after `next_step` steps, and
`restore(state)` on a trainer built from the same config continues it step for step, with the same
weights and rewards as a run that never stopped (`specroll.train.train_state`,
`specroll.train.checkpointing`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch

from specroll.engine.engine import Engine
from specroll.engine.factory import build_engine
from specroll.engine.threads import apply_threads
from specroll.model.catalog import resolve_model_dir
from specroll.rollout import RolloutResult, encode_prompts, make_requests, make_task, run_requests
from specroll.tokenizer import load_tokenizer
from specroll.train.grpo import group_advantages, policy_loss
from specroll.train.online_head import OnlineHead, born_head_changes
from specroll.train.policy_forward import PolicyForward, load_trainable, padded, sequence_logprobs
from specroll.train.metrics_log import StepMetrics
from specroll.train.recent_responses import RecentResponses
from specroll.train.run_config import describe_changes, future_changes
from specroll.train.schedule import EpochSchedule
from specroll.train.train_state import TrainState
from specroll.train.weights import weights_sha256
from specroll.train.grpo_config import GRPOConfig


StepCallback = Callable[[StepMetrics], None]


class GRPOTrainer:
    def __init__(self, config: GRPOConfig, head_dir: Path | None = None) -> None:
        """`head_dir`: where a draft head born with the run is kept (`online_head.born_head_changes`:
        with `online_head` on a target with no head of its own)."""
        rollout = replace(config.rollout, model_dir=resolve_model_dir(config.rollout.model_dir))
        self.config, self.rollout = config, rollout
        self.task = make_task(rollout)
        pool = self.task.problems(config.dataset_size or rollout.num_prompts, rollout.engine.seed)
        self.problems = {p.prompt_id: p for p in pool}
        self.schedule = EpochSchedule(
            tuple(sorted(self.problems)), min(rollout.num_prompts, len(pool)), rollout.engine.seed
        )
        self.tokenizer = load_tokenizer(rollout.model_dir)
        self.prompts = encode_prompts(self.tokenizer, self.task, self.problems)
        self.policy = load_trainable(rollout.model_dir, rollout.engine.device)
        born = self._born_head(head_dir) if config.online_head else None
        if born is not None:  # the head and the drafters it joins: speed only, like every drafter field
            config = replace(config, rollout=replace(config.rollout, **born))
            self.config, self.rollout = config, (rollout := replace(rollout, **born))
        spec = rollout.engine_spec()
        apply_threads(spec)
        longest = max(map(len, self.prompts.values()))
        self.engine = build_engine(spec, longest)
        plain = replace(spec, drafter=None)  # the same engine without speculation
        self.plain_engine = build_engine(plain, longest) if config.shadow_plain else None
        self.policy_forward = PolicyForward(self.policy, rollout.engine)
        keeps_reference = config.kl_coef > 0 or config.track_drift
        self.reference = (
            PolicyForward(copy.deepcopy(self.policy).requires_grad_(False), rollout.engine)
            if keeps_reference
            else None
        )
        self.online_head = OnlineHead.attach(self.engine, self.config) if config.online_head else None
        if born is not None:
            self.online_head.head.hold_drafts()  # untrained: no drafts until the spot trainer offers weights
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        self.initial_weights_sha256 = weights_sha256(self.policy)
        self.weights_sha256 = self.initial_weights_sha256  # of the policy as it stands: hashed once a step
        self._ids_per_step = (max(self.problems) + 1) * rollout.n  # request ids never repeat across steps
        self.next_step = 0  # steps done; `run` goes on from here
        self.recent = RecentResponses()  # the last steps' responses, to warm a resumed run's drafters

    def _born_head(self, directory: Path | None) -> dict | None:
        """The rollout fields of a run whose online head is born with it (None: the target has one)."""
        prompts = list(self.prompts.values())
        weight, stops = self.policy.lm_head.weight, self.tokenizer.stop_token_ids
        return born_head_changes(self.rollout, weight, prompts, stops, directory)

    def run(self, on_step: StepCallback | None = None) -> list[StepMetrics]:
        """The steps from `next_step` to `config.steps`; `on_step` sees each one's metrics once it is
        done (and `next_step` has moved past it, so `state()` there resumes after it)."""
        history = []
        for step in range(self.next_step, self.config.steps):
            history.append(self.train_step(step))
            self.next_step = step + 1
            if on_step is not None:
                on_step(history[-1])
        return history

    def close(self) -> None:
        """Stop the online head's trainer thread (nothing else holds a resource past `run`)."""
        if self.online_head is not None:
            self.online_head.close()

    def state(self) -> TrainState:
        """The run as it stands, for `restore`; its tensors are the live ones: write them before the
        next step."""
        return TrainState(
            self.next_step,
            self.config,
            self.policy.state_dict(),
            self.optimizer.state_dict(),
            torch.get_rng_state(),
            self.weights_sha256,
            self.initial_weights_sha256,
            list(self.recent.responses),
        )

    def restore(self, state: TrainState) -> None:
        """Go on with the run `state` was taken from: its weights (here and in the engines), AdamW's
        state, torch's generator and the drafters' history. Refuses a config that changes the run's
        future and an initial policy (the KL reference) other than the run's."""
        self._check_same_run(state)
        self.policy.load_state_dict(state.policy, strict=False)  # tied weights come once; the hash checks all
        self.weights_sha256 = weights_sha256(self.policy)
        if self.weights_sha256 != state.weights_sha256:
            raise ValueError("the saved policy's weights do not match their recorded sha256")
        self.optimizer.load_state_dict(state.optimizer)
        torch.set_rng_state(state.torch_rng)
        self.recent = RecentResponses(responses=state.recent_responses)
        self.engine.warm_drafter(lambda drafter: self.recent.replay(drafter, self.prompts))
        self.next_step = state.next_step
        self._sync_weights()

    def _check_same_run(self, state: TrainState) -> None:
        changes = future_changes(state.config, self.config)
        if changes:
            raise ValueError(
                f"the run's config differs where it sets its future: "
                f"{describe_changes(state.config, self.config, changes)}"
            )
        if state.initial_weights_sha256 != self.initial_weights_sha256:
            raise ValueError(
                f"{self.rollout.model_dir} no longer holds the run's initial policy (sha256 "
                f"{self.initial_weights_sha256[:12]}, the run's {state.initial_weights_sha256[:12]})"
            )

    def train_step(self, step: int) -> StepMetrics:
        if self.online_head is not None:
            self.online_head.resume()
        result, rollout_seconds = self._rollout(self.engine, step)
        if self.online_head is not None:  # before the update: the targets use this step's policy
            self.online_head.after_rollout(step, result)
        self.recent.add_step(step, result.records)
        plain_seconds, same = None, None
        if self.plain_engine is not None:
            plain, plain_seconds = self._rollout(self.plain_engine, step)
            same = _outputs(plain) == _outputs(result)
        start = time.perf_counter()
        loss, clip_fraction, kl, max_log_ratio, drift = self._update(result)
        train_seconds = time.perf_counter() - start
        self.weights_sha256 = weights_sha256(self.policy)
        start = time.perf_counter()
        self._sync_weights()
        sync_seconds = time.perf_counter() - start
        s = result.summary
        return StepMetrics(
            step,
            s.mean_reward,
            rollout_seconds,
            train_seconds,
            sync_seconds,
            s.output_tokens,
            s.mean_acceptance_length,
            s.forward_passes,
            self.weights_sha256,
            loss,
            clip_fraction,
            kl,
            max_log_ratio,
            len({r.prompt_id for r in result.records}),
            result.accepted_per_draft,
            plain_seconds,
            same,
            drift,
            **(self.online_head.metrics() if self.online_head is not None else {}),
        )

    def _rollout(self, engine: Engine, step: int) -> tuple[RolloutResult, float]:
        engine.advance_step(step)
        chosen = [self.problems[i] for i in self.schedule.step_problems(step)]
        requests = make_requests(
            self.rollout, self.tokenizer, chosen, self.prompts, first_id=step * self._ids_per_step
        )
        start = time.perf_counter()
        result = run_requests(engine, requests, self.tokenizer, self.task, self.problems)
        return result, time.perf_counter() - start

    def _update(self, result: RolloutResult) -> tuple[float, float, float, float, float | None]:
        """One AdamW step on the step's responses; returns (loss, clipped fraction, mean KL, the largest
        |log-ratio| before the update, the rollout policy's KL to the initial one or None)."""
        records = [r for r in result.records if r.reward is not None and r.token_ids]
        if not records:
            return 0.0, 0.0, 0.0, 0.0, None
        advantages = group_advantages([r.reward for r in records], [r.prompt_id for r in records])
        num_tokens = sum(len(r.token_ids) for r in records)
        self.optimizer.zero_grad(set_to_none=True)
        loss, clipped, kl, gap, drift = 0.0, 0, 0.0, 0.0, 0.0
        size = self.config.micro_batch_size
        for start in range(0, len(records), size):
            chunk = records[start : start + size]
            terms, chunk_drift = self._chunk_loss(
                chunk, advantages[start : start + size].to(self.rollout.engine.device)
            )
            drift += chunk_drift
            (terms.loss / num_tokens).backward()
            loss, clipped, kl = (
                loss + terms.loss.item() / num_tokens,
                clipped + terms.clipped,
                kl + terms.kl_sum,
            )
            gap = max(gap, terms.max_log_ratio)
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        tracked = drift / num_tokens if self.config.track_drift else None
        return loss, clipped / num_tokens, kl / num_tokens, gap, tracked

    def _chunk_loss(self, records, advantages: torch.Tensor):
        prompts = [self.prompts[r.prompt_id] for r in records]
        completions = [r.token_ids for r in records]
        temperature = self.rollout.temperature
        new, mask = sequence_logprobs(self.policy_forward, prompts, completions, temperature)
        rollout_lp = padded([r.logprobs for r in records], mask.shape[1], torch.float32, mask.device)
        ref, drift = None, 0.0
        if self.reference is not None:
            with torch.no_grad():
                ref, _ = sequence_logprobs(self.reference, prompts, completions, temperature)
            drift = drift_kl_sum(rollout_lp, ref, mask)
        terms = policy_loss(new, rollout_lp, advantages, mask, self.config.clip_eps, ref, self.config.kl_coef)
        return terms, drift

    def _sync_weights(self) -> None:
        weights = self.policy.state_dict()
        for engine in (self.engine, self.plain_engine):
            if engine is not None:
                engine.load_weights(weights)


def drift_kl_sum(rollout_logprobs: torch.Tensor, initial_logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """Sum over the rollout's tokens of the k3 estimate of KL(pi_rollout || pi_initial): the tokens were
    drawn from pi_rollout, so exp(r) - r - 1 with r = log pi_initial - log pi_rollout is unbiased, >= 0."""
    log_ratio = initial_logprobs - rollout_logprobs
    return float(((torch.exp(log_ratio) - log_ratio - 1) * mask).sum())


def _outputs(result: RolloutResult) -> list[tuple]:
    return [(r.token_ids, r.logprobs) for r in result.records]
