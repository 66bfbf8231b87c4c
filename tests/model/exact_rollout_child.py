"""One exact-mode rollout in a process of its own, for `test_exact_under_load.py` and
`test_bf16_exact.py`: a model directory, a batch size, a thread count and a heap-noise seed in, and
optionally a dtype and a drafter (drafted under `fixed-3`); every request's tokens and
log-probabilities (as hex, to the bit), the threads it ran on and the numerics' description out, as
JSON on stdout.

The heap noise (a seeded number of small allocations of seeded sizes, kept alive) moves where every
later small tensor lands, so the forwards' buffers lie at other addresses than in a run without it."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from specroll.engine.engine import add_requests
from specroll.engine.factory import build_engine
from specroll.engine.threads import apply_threads
from specroll.engine.request import Request, SamplingParams
from specroll.engine.spec import EngineSpec
from specroll.engine_config import EngineConfig

import torch  # noqa: E402  (after specroll, as a user's script would import it)

NUM_PROMPTS, N, MAX_TOKENS = 2, 2, 8


def heap_noise(seed: int) -> list:
    rng = random.Random(seed)
    return [bytearray(rng.randrange(1, 4096)) for _ in range(rng.randrange(50, 500))] if seed else []


def requests(vocab_size: int) -> list[Request]:
    rng = random.Random(0)
    out, params = [], SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0)
    for p in range(NUM_PROMPTS):
        prompt = tuple(rng.randrange(vocab_size) for _ in range(rng.randrange(20, 40)))
        for s in range(N):
            out.append(Request(p * N + s, p, s, prompt, params))
    return out


def main(
    model_dir: str, batch: int, threads: int, noise_seed: int, dtype: str = "float32", drafter: str = ""
) -> None:
    kept = heap_noise(noise_seed)
    spec = EngineSpec(
        Path(model_dir),
        MAX_TOKENS,
        EngineConfig(max_batch_size=batch, seed=11, dtype=dtype),
        drafter=drafter or None,
        policy="fixed-3",
        threads=threads,
    )
    apply_threads(spec)
    engine = build_engine(spec, longest_prompt=40)
    work = requests(engine.parts_for_testing().runner.config.vocab_size)
    assert not add_requests(engine, work)
    engine.run()
    records = [
        {"tokens": r.output_token_ids, "logprobs": [float(x).hex() for x in r.output_logprobs]} for r in work
    ]
    numerics = engine.describe_numerics()
    out = {"threads": torch.get_num_threads(), "records": records, "noise": len(kept), "numerics": numerics}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:])
