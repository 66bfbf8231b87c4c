"""`Request.noise_key` keys exact mode's noise in place of the request id: requests with different ids
and one key draw the same tokens (plain and speculative), and without a key the id keys it as before."""

from __future__ import annotations

from specroll.engine.factory import build_engine
from specroll.engine.request import Request, SamplingParams
from specroll.rollout import RolloutConfig
from specroll.engine_config import EngineConfig

PROMPT = (5, 6, 7, 8)


def _tokens(speculate: str, requests: list[Request]) -> list[list[int]]:
    spec = RolloutConfig(
        speculate=speculate, max_tokens=24, engine=EngineConfig(max_batch_size=8)
    ).engine_spec()
    engine = build_engine(spec, len(PROMPT))
    for r in requests:
        engine.add_request(r)
    engine.run()
    return [r.output_token_ids for r in requests]


def _requests(ids_and_keys) -> list[Request]:
    params = SamplingParams(max_tokens=24, stop_token_ids=())
    return [Request(i, 0, 0, PROMPT, params, noise_key=k) for i, k in ids_and_keys]


def test_one_key_one_draw_whatever_the_id():
    plain = _tokens("off", _requests([(0, 77), (1, 77), (2, None), (77, None), (3, None)]))
    assert plain[0] == plain[1] == plain[3] != plain[2]
    assert _tokens("on", _requests([(9, 77), (3, None)])) == [plain[0], plain[4]]
