"""Serving counters and their Prometheus text (/metrics). The engine thread folds each forward's
telemetry in (`absorb`) and clears the engine's, so a long-running server keeps no per-forward rows."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class ServeMetrics:
    started: float = field(default_factory=time.monotonic)
    num_forwards: int = 0  # verification forwards (decode)
    num_prefills: int = 0
    num_output_tokens: int = 0  # tokens emitted, every forward
    num_decode_rows: int = 0  # requests over all verification forwards
    num_decode_tokens: int = 0  # tokens those rows emitted
    last_batch_size: int = 0
    drafts: dict[str, int] = field(default_factory=dict)  # verified drafts by drafter
    accepted: dict[str, int] = field(default_factory=dict)  # their accepted tokens
    num_requests_total: int = 0  # choices submitted (written on the event loop)
    num_finished: dict[str, int] = field(default_factory=dict)  # choices ended, by finish reason

    def absorb(self, telemetry) -> None:
        """Fold an engine's `Telemetry` in, then clear it."""
        for s in telemetry.decode_forwards:
            self.num_forwards += 1
            self.num_decode_rows += s.batch_size
            self.num_decode_tokens += s.num_emitted
            self.last_batch_size = s.batch_size
            for source, k, a in zip(s.sources, s.drafted, s.accepted):
                if source and k:
                    self.drafts[source] = self.drafts.get(source, 0) + 1
                    self.accepted[source] = self.accepted.get(source, 0) + a
        self.num_prefills += telemetry.num_prefills
        self.num_output_tokens += telemetry.output_tokens
        telemetry.clear()

    def finished(self, reason: str) -> None:
        self.num_finished[reason] = self.num_finished.get(reason, 0) + 1

    def render(self, running: int, waiting: int, weight_version: int, model_name: str = "") -> str:
        """specroll's own series, then vLLM's names for those a load balancer reads (`vllm_series`)."""
        return self._own(running, waiting, weight_version) + self.vllm_series(running, waiting, model_name)

    def vllm_series(self, running: int, waiting: int, model_name: str) -> str:
        """The vLLM series routers and RL frameworks read to balance load, under vLLM's names and labels."""
        labels = f'engine="0",model_name="{model_name}"'
        finished = {r: self.num_finished.get(r, 0) for r in ("stop", "length", "abort")}
        rows = [
            _vllm(
                "vllm:num_requests_running", "gauge", "requests in the running batch", labels, {"": running}
            ),
            _vllm("vllm:num_requests_waiting", "gauge", "requests queued or held", labels, {"": waiting}),
            _vllm(
                "vllm:generation_tokens_total",
                "counter",
                "tokens emitted",
                labels,
                {"": self.num_output_tokens},
            ),
            _vllm(
                "vllm:request_success_total",
                "counter",
                "requests finished, by finish reason",
                labels,
                {f',finished_reason="{r}"': n for r, n in finished.items()},
            ),
        ]
        return "\n".join(rows) + "\n"

    def _own(self, running: int, waiting: int, weight_version: int) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        lines = [
            _gauge("specroll_requests_running", "choices in the running batch", running),
            _gauge("specroll_requests_waiting", "choices queued or held by a pause", waiting),
            _counter("specroll_requests_total", "choices submitted", self.num_requests_total),
            _counter("specroll_output_tokens_total", "tokens emitted", self.num_output_tokens),
            _gauge(
                "specroll_output_tokens_per_second",
                "tokens emitted a second since start",
                self.num_output_tokens / elapsed,
            ),
            _counter("specroll_forwards_total", "verification forwards", self.num_forwards),
            _counter("specroll_prefills_total", "prefill forwards", self.num_prefills),
            _gauge(
                "specroll_tokens_per_forward",
                "tokens a request gains in one verification forward",
                self.num_decode_tokens / self.num_decode_rows if self.num_decode_rows else 0.0,
            ),
            _gauge(
                "specroll_batch_size", "requests in the latest verification forward", self.last_batch_size
            ),
            _gauge("specroll_weight_version", "the weight version serving", weight_version),
        ]
        lines.append(
            _labelled(
                "specroll_acceptance_length",
                "gauge",
                "mean tokens accepted a verified draft, by drafter",
                "drafter",
                {k: self.accepted[k] / n for k, n in self.drafts.items()},
            )
        )
        lines.append(
            _labelled(
                "specroll_requests_finished_total",
                "counter",
                "choices ended, by finish reason",
                "reason",
                self.num_finished,
            )
        )
        return "\n".join(lines) + "\n"


def _gauge(name: str, help: str, value: float) -> str:
    return f"# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"


def _counter(name: str, help: str, value: float) -> str:
    return f"# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"


def _labelled(name: str, kind: str, help: str, label: str, values: dict[str, float]) -> str:
    rows = [f'{name}{{{label}="{key}"}} {value}' for key, value in sorted(values.items())]
    return "\n".join([f"# HELP {name} {help}", f"# TYPE {name} {kind}", *rows])


def _vllm(name: str, kind: str, help: str, labels: str, values: dict[str, float]) -> str:
    """One vLLM series; `values` maps each row's extra labels (",key=\"value\"" or "") to its value."""
    rows = [f"{name}{{{labels}{extra}}} {value}" for extra, value in values.items()]
    return "\n".join([f"# HELP {name} {help}", f"# TYPE {name} {kind}", *rows])
