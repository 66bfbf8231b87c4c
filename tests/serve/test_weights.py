"""A weight update from a safetensors directory: between forwards, the tokens change, /weight_info's
version and sha256 move, and every response names the version that drew it; pickles are refused."""

from __future__ import annotations

import httpx
import torch
from safetensors.torch import save_file

from specroll.model.loader import load_state_dict
from specroll.rollout import DEFAULT_MODEL

BODY = {"prompt": [5, 6, 7, 8], "max_tokens": 20, "seed": 9, "return_token_ids": True}


def _tokens(url: str) -> tuple[list[int], int]:
    out = httpx.post(url + "/v1/completions", json=BODY, timeout=60).json()
    return out["choices"][0]["token_ids"], out["choices"][0]["weight_version"]


def test_update_weights_from_a_directory(server, tmp_path):
    state = load_state_dict(DEFAULT_MODEL)
    generator = torch.Generator().manual_seed(0)
    moved = {k: v + 0.5 * torch.randn(v.shape, generator=generator) for k, v in state.items()}
    save_file({k: v.contiguous() for k, v in moved.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "pickled").mkdir()
    torch.save(state, tmp_path / "pickled" / "model.bin")

    before, info = _tokens(server.url), httpx.get(server.url + "/weight_info").json()
    refused = httpx.post(
        server.url + "/update_weights", json={"update_info": {"path": str(tmp_path / "pickled")}}
    )
    assert refused.status_code == 400 and "pickle" in refused.json()["error"]["message"]
    answer = httpx.post(server.url + "/update_weights", json={"update_info": {"path": str(tmp_path)}}).json()
    try:
        after, moved_info = _tokens(server.url), httpx.get(server.url + "/weight_info").json()
        assert moved_info["weight_version"] == info["weight_version"] + 1 == answer["weight_version"]
        assert moved_info["weights_sha256"] != info["weights_sha256"]
        assert moved_info["drafter_step"] == moved_info["weight_version"]  # history drafting moved too
        assert after[1] == moved_info["weight_version"] and after[0] != before[0]
    finally:  # the other tests share this server: give it its weights back (AReaL's alias)
        restored = httpx.post(server.url + "/areal_update_weights", json={"model_path": str(DEFAULT_MODEL)})
        assert restored.status_code == 200
    assert _tokens(server.url)[0] == before[0]
    assert httpx.get(server.url + "/weight_info").json()["weights_sha256"] == info["weights_sha256"]
