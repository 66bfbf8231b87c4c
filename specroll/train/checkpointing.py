"""A training run's state on disk: written atomically every few steps, the latest read back to resume.

What the state holds, and why that is all a run's future depends on: `specroll.train.train_state`.

Layout, one directory per saved step under `RUN/train_state/`:

    step-000002/                  the state after 2 steps (0 and 1): the run resumes at step 2
        policy/                   model.safetensors and the source's config and tokenizer: `--model` loads it
        optimizer.safetensors     AdamW's tensors, named "<parameter index>/<name>"
        state.json                next_step, config, fingerprints, AdamW's param_groups, torch's generator,
                                  the recent responses (written last)

Nothing is pickled. A state is written into `.partial-step-...` beside its target and renamed into
place once every file is synced, so a kill mid-write leaves the previous state whole; the previous
states beyond the last `keep` and any partial directory a kill left behind are removed only after
the new state is in place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specroll.train.recent_responses import FinishedResponse
from specroll.train.run_config import config_from_dict, config_to_dict
from specroll.train.train_state import TrainState
from specroll.train.weights import source_files, unique_tensors

STATE_DIR = "train_state"
FORMAT = 1
_PREFIX, _PARTIAL = "step-", ".partial-"


def save_state(run_dir: str | Path, state: TrainState, keep: int = 1) -> Path:
    """Write `state` as RUN/train_state/step-<next_step> atomically, then keep the last `keep` states."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    root = Path(run_dir) / STATE_DIR
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"{_PREFIX}{state.next_step:06d}"
    partial = Path(tempfile.mkdtemp(prefix=f"{_PARTIAL}{target.name}-", dir=root))
    try:
        _write(partial, state)
        _move_into_place(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _sync(root)
    _prune(root, keep)
    return target


def latest_state_dir(run_dir: str | Path) -> Path | None:
    """The newest complete state of the run in `run_dir`, or None."""
    saved = _saved_states(Path(run_dir) / STATE_DIR)
    return saved[-1] if saved else None


def load_state(state_dir: str | Path) -> TrainState:
    """Read a state `save_state` wrote; the policy's tied weights appear under their first name only."""
    state_dir = Path(state_dir)
    meta = json.loads((state_dir / "state.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{state_dir}: training state format {meta.get('format')!r}, expected {FORMAT}")
    optimizer = {
        "state": _nested(load_file(state_dir / "optimizer.safetensors")),
        "param_groups": [_group_from_json(group) for group in meta["param_groups"]],
    }
    return TrainState(
        next_step=meta["next_step"],
        config=config_from_dict(meta["config"]),
        policy=load_file(state_dir / "policy" / "model.safetensors"),
        optimizer=optimizer,
        torch_rng=torch.frombuffer(bytearray.fromhex(meta["torch_rng"]), dtype=torch.uint8),
        weights_sha256=meta["weights_sha256"],
        initial_weights_sha256=meta["initial_weights_sha256"],
        recent_responses=[FinishedResponse(s, i, g, tuple(t)) for s, i, g, t in meta["recent_responses"]],
    )


# ---- writing --------------------------------------------------------------------------------------


def _write(folder: Path, state: TrainState) -> None:
    _write_policy(folder / "policy", state.policy, Path(state.config.rollout.model_dir))
    flat = {
        f"{index}/{name}": value.contiguous()
        for index, named in state.optimizer["state"].items()
        for name, value in named.items()
    }
    _save_tensors(flat, folder / "optimizer.safetensors")
    meta = {
        "format": FORMAT,
        "next_step": state.next_step,
        "config": config_to_dict(state.config),
        "weights_sha256": state.weights_sha256,
        "initial_weights_sha256": state.initial_weights_sha256,
        "param_groups": state.optimizer["param_groups"],
        "torch_rng": state.torch_rng.numpy().tobytes().hex(),
        "recent_responses": [
            [r.step, r.request_id, r.group_id, list(r.token_ids)] for r in state.recent_responses
        ],
    }
    _write_synced(folder / "state.json", json.dumps(meta).encode())
    _sync(folder)


def _write_policy(folder: Path, weights: dict[str, torch.Tensor], source_dir: Path) -> None:
    """model.safetensors (tied tensors once, under their first name, as `save_pretrained` does) and
    every other file of the source checkpoint (config, tokenizer), so `--model` loads the folder."""
    folder.mkdir()
    _save_tensors(unique_tensors(weights), folder / "model.safetensors")
    for path in source_files(source_dir):
        shutil.copyfile(path, folder / path.name)
        _sync(folder / path.name)
    _sync(folder)


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    save_file(tensors, path, metadata={"format": "pt"})
    _sync(path)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sync(path: Path) -> None:
    """fsync a file or a directory (a rename is durable once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_into_place(partial: Path, target: Path) -> None:
    """Rename `partial` to `target`; an existing `target` (the same step saved again) is set aside
    first and removed after, so one whole copy exists at every moment."""
    if not target.exists():
        os.rename(partial, target)
        return
    aside = target.with_name(f"{_PARTIAL}old-{target.name}")
    shutil.rmtree(aside, ignore_errors=True)
    os.rename(target, aside)
    os.rename(partial, target)
    shutil.rmtree(aside)


def _prune(root: Path, keep: int) -> None:
    for old in _saved_states(root)[:-keep]:
        shutil.rmtree(old)
    for leftover in root.glob(f"{_PARTIAL}*"):  # a write a kill interrupted: never renamed, never read
        shutil.rmtree(leftover, ignore_errors=True)


# ---- reading --------------------------------------------------------------------------------------


def _saved_states(root: Path) -> list[Path]:
    """Complete states (partial ones carry another prefix), oldest first."""
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.glob(f"{_PREFIX}*")
        if p.name[len(_PREFIX) :].isdigit() and (p / "state.json").is_file()
    ]
    return sorted(found, key=lambda p: int(p.name[len(_PREFIX) :]))


def _nested(flat: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        index, name = key.split("/", 1)
        state.setdefault(int(index), {})[name] = value
    return state


def _group_from_json(group: dict) -> dict:
    """JSON turned AdamW's `betas` tuple into a list; give it back as torch wrote it."""
    return {
        name: tuple(value) if isinstance(value, list) and name != "params" else value
        for name, value in group.items()
    }
