"""Teacher-forced features kept on disk, so that heads trained with other settings on the same
responses skip the target's forwards (the costly part of a warm start: minutes per 100k positions).

A cache records what its features depend on (the checkpoint's files, the token sequences, prompts
included, and the temperature) and the target layers they carry. It serves any head whose layers
are among those: the final hidden state always comes first, then one H-wide chunk per stored layer,
so a head reading fewer layers gets those chunks alone. Anything else is refused, naming what differs.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

from specroll.head.features import FeatureSequence

FORMAT = "specroll-head-features-1"


@dataclass(frozen=True)
class FeatureSource:
    """What the cached features were computed from; two caches agree when these are equal."""

    checkpoint: str  # its weight files' names, sizes and modification times (`checkpoint_fingerprint`)
    sequences_sha256: str  # of the prompts and responses teacher-forced (`sequences_sha256`)
    temperature: float


def checkpoint_fingerprint(model_dir: str | Path) -> str:
    """The checkpoint's directory and its weight files' sizes and modification times: a checkpoint
    overwritten in place (a trained policy saved over its predecessor) is another checkpoint."""
    root = Path(model_dir).resolve()
    files = sorted(root.glob("*.safetensors")) + sorted(root.glob("*.bin"))
    stamps = [f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files]
    return f"{root} [{', '.join(stamps)}]"


def sequences_sha256(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> str:
    digest = hashlib.sha256()
    for prompt, response in zip(prompts, responses):
        digest.update(f"{list(prompt)}|{list(response)};".encode())
    return digest.hexdigest()


def save_features(
    path: str | Path, sequences: Sequence[FeatureSequence], source: FeatureSource, layers: Sequence[int]
) -> None:
    torch.save(
        {
            "format": FORMAT,
            "source": asdict(source),
            "layers": list(layers),
            "sequences": [(s.tokens, s.hidden, s.top_ids, s.top_probs) for s in sequences],
        },
        path,
    )


def load_features(
    path: str | Path, source: FeatureSource, layers: Sequence[int], hidden_size: int
) -> list[FeatureSequence]:
    """The cached sequences with the final hidden state and `layers`' chunks, in that order."""
    saved = torch.load(path, weights_only=True)
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise ValueError(f"{path} is not a specroll feature cache")
    stored = saved["source"]
    differs = [k for k, v in asdict(source).items() if stored.get(k) != v]
    if differs:
        raise ValueError(
            f"{path} holds features of another {', '.join(differs)} "
            f"({', '.join(f'{k}={stored.get(k)!r}' for k in differs)}); give another cache file"
        )
    stored_layers = list(saved["layers"])
    missing = [i for i in layers if i not in stored_layers]
    if missing:
        raise ValueError(
            f"{path} carries target layers {stored_layers}, not {missing}; give another cache file"
        )
    chunks = [0, *(1 + stored_layers.index(i) for i in layers)]
    columns = torch.cat([torch.arange(c * hidden_size, (c + 1) * hidden_size) for c in chunks])
    return [
        FeatureSequence(tokens, hidden.index_select(1, columns), top_ids, top_probs)
        for tokens, hidden, top_ids, top_probs in saved["sequences"]
    ]
