"""What made a rollout file: written beside it, checked by whatever learns from or replays it.

`specroll rollout --out R.jsonl` writes `R.provenance.json`: the checkpoint (its name and a hash of
its weights), the workload (task or prompts file, number of prompts, samples, seed), the sampling
settings and rule, max tokens and the speculation settings. `head train`, `head eval` and `head
replay` rebuild the prompts from their own flags and read the responses as that workload's: a file
made by another model or another workload would be taken silently, so they compare the fields that
matter to them (`TRAINING_FIELDS`, `REPLAY_FIELDS`) and refuse a mismatch by name. No torch here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from specroll.model.catalog import specroll_home

SUFFIX = ".provenance.json"
FORMAT = "specroll-rollout-provenance/1"

# a response is training data for the head of this checkpoint, at this temperature, on these prompts
TRAINING_FIELDS = ("weights_sha256", "task", "prompts_sha256", "num_prompts", "seed", "temperature",
                   "top_k", "top_p")  # fmt: skip
# a replay re-draws every token with the rollout's noise, so its length and its rule must match too
REPLAY_FIELDS = (*TRAINING_FIELDS, "max_tokens", "sampling_rule", "verify")
_FLAGS = {  # a field's flag, for the message
    "weights_sha256": "--model",
    "prompts_sha256": "--prompts",
    "num_prompts": "--num-prompts",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "max_tokens": "--max-tokens",
    "sampling_rule": "--sampling-rule",
}


@dataclass(frozen=True)
class RolloutProvenance:
    model: str  # the checkpoint directory's name
    weights_sha256: str  # of its weight files (`weights_sha256`)
    task: str
    prompts_sha256: str | None  # of the prompts file, where the workload is one
    num_prompts: int
    n: int
    seed: int
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    sampling_rule: str
    verify: str
    speculate: str
    drafter: str | None  # the drafter `speculate` chose (None: no speculation)
    policy: str
    format: str = FORMAT

    @classmethod
    def of(cls, config) -> "RolloutProvenance":
        """The provenance of a rollout run with `config` (a `RolloutConfig`)."""
        prompts = None if config.prompts is None else file_sha256(Path(config.prompts))
        return cls(
            Path(config.model_dir).resolve().name, weights_sha256(config.model_dir), config.task, prompts,
            config.num_prompts, config.n, config.engine.seed, config.max_tokens, config.temperature,
            config.top_k, config.top_p, config.engine.sampling_rule, config.engine.verify, config.speculate,
            config.drafter_name, config.policy,
        )  # fmt: skip

    def write_beside(self, rollout: str | Path) -> Path:
        path = provenance_path(rollout)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path


def provenance_path(rollout: str | Path) -> Path:
    return Path(rollout).with_suffix(SUFFIX)


def read_provenance(rollout: str | Path) -> RolloutProvenance:
    """The provenance beside `rollout`; a clear error where there is none or it is unreadable."""
    path = provenance_path(rollout)
    try:
        values = json.loads(path.read_text())
        known = {f.name for f in fields(RolloutProvenance)}
        return RolloutProvenance(**{k: v for k, v in values.items() if k in known})
    except FileNotFoundError:
        raise ValueError(
            f"{rollout} has no {path.name} beside it, so what made it is unknown: use a rollout "
            "written by `specroll rollout --out` (it writes one), with its provenance file"
        ) from None
    except (ValueError, TypeError) as error:
        raise ValueError(f"{path} is not a rollout provenance file: {error}") from None


def check_provenance(rollout: str | Path, expected: RolloutProvenance, names: tuple[str, ...]) -> None:
    """Refuse `rollout` where its provenance differs from `expected` in any of `names`, naming each."""
    recorded = read_provenance(rollout)
    wrong = [name for name in names if getattr(recorded, name) != getattr(expected, name)]
    if wrong:
        differences = "; ".join(_difference(name, recorded, expected) for name in wrong)
        raise ValueError(
            f"{rollout} was made by another run than this one: {differences}. Give the flags the "
            f"rollout ran with (its {provenance_path(rollout).name} lists them)"
        )


def _difference(name: str, recorded: RolloutProvenance, expected: RolloutProvenance) -> str:
    flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
    if name == "weights_sha256":
        return f"its model is {recorded.model} with other weights than {expected.model}'s ({flag})"
    return f"{name} {getattr(recorded, name)!r} here {getattr(expected, name)!r} ({flag})"


def weights_sha256(model_dir: str | Path) -> str:
    """sha256 over the checkpoint's weight files, names and contents; remembered under
    `specroll_home()` by path, size and modification time, so a checkpoint is read once."""
    files = sorted(Path(model_dir).resolve().glob("*.safetensors")) + sorted(
        Path(model_dir).resolve().glob("*.bin")
    )
    stamp = ";".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    memo = specroll_home() / "weights-sha256" / f"{hashlib.sha256(stamp.encode()).hexdigest()}.txt"
    if memo.is_file():
        return memo.read_text().strip()
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        digest.update(bytes.fromhex(file_sha256(f)))
    value = digest.hexdigest()
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(value + "\n")
    return value


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()
