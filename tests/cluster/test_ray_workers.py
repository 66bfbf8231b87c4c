"""`specroll rollout --workers 2` on Ray: the one-process records and tokens, a worker killed
mid-rollout, a worker that cannot start."""

from __future__ import annotations

import json
import shutil

import pytest
import ray

from specroll.cli import main
from specroll.cluster.multi_worker import ClusterConfig
from specroll.cluster.ray_pool import WorkerStartError
from specroll.engine_config import EngineConfig
from specroll.rollout import DEFAULT_MODEL, RolloutConfig, run_rollout

from test_coordinator import assert_same_tokens, on_workers

SMALL = ["--num-prompts", "6", "--n", "4", "--max-tokens", "48", "--seed", "2", "--no-progress"]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="WARNING")
    yield
    ray.shutdown()


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_workers_write_one_processs_records(tmp_path, capsys):
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert main(["rollout", *SMALL, "--out", str(one)]) == 0
    assert (
        main(
            [
                "rollout",
                *SMALL,
                "--workers",
                "2",
                "--dispatch",
                "context-aware",
                "--chunk-tokens",
                "16",
                "--out",
                str(two),
            ]
        )
        == 0
    )
    assert "2, context-aware" in capsys.readouterr().out
    assert read_jsonl(one) == read_jsonl(
        two
    )  # every field, in order: tokens, log-probabilities, text, reward


def test_a_killed_worker_loses_no_request():
    config = RolloutConfig(num_prompts=6, n=4, max_tokens=48, engine=EngineConfig(seed=5, max_batch_size=8))
    expected = run_rollout(config)
    killed = {}

    def kill_worker_one(coordinator, worker):
        if not killed and any(coordinator.states[i].token_ids for i in coordinator.slots[1].running):
            killed["holding"] = len(coordinator.slots[1].running)
            coordinator.pool.kill(1)  # the actor's process ends; its call in flight fails

    result = on_workers(config.with_cluster(num_workers=2, dispatch="static"), kill_worker_one)
    assert killed["holding"] > 0 and result.cluster["lost_workers"] == 1
    assert all(r.error is None for r in result.records)
    assert_same_tokens(expected, result)


def test_a_worker_that_cannot_start_names_the_cause(tmp_path):
    broken = tmp_path / "policy"
    shutil.copytree(DEFAULT_MODEL, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    cluster = ClusterConfig(num_workers=2)
    config = RolloutConfig(
        model_dir=broken, num_prompts=2, n=2, max_tokens=8, cluster=cluster, speculate="off"
    )
    with pytest.raises(
        WorkerStartError,
        match="worker 0 could not start: ValueError: checkpoint .*cannot read model.safetensors",
    ):
        run_rollout(config)
