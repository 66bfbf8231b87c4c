"""Conformance of `specroll serve` with `vllm serve`: the same requests to both, their answers' shapes
compared field by field (JSON key paths, value types, status codes, stream framing), never the token
values.

    python scripts/serve_conformance.py --specroll-url http://127.0.0.1:8000 --vllm-url http://127.0.0.1:8001
    python scripts/serve_conformance.py --start --model smollm2     # starts both servers, stops them after
    ... --record FILE        # also keep vLLM's answers' shapes (tests/serve/vllm_0.32.0_shapes.json)
    ... --against FILE       # compare with such a recording: no vLLM needed

The report lists, per request: a status code that differs, each key path present in one answer and not
the other, and each path whose value types differ. A shape is the set of JSON types seen at each key
path (`absent` where some objects of a list lack the key): a list's items merge under `[]`, and the
objects keyed by token (`top_logprobs`, `prompt_logprobs`' entries) merge under `{*}`, so the tokens
drawn never show as differences. A stream's shape is its first chunk's (`$first`), every chunk's
merged (`$events[]`), its last chunk's (`$last`, the usage) and whether `data: [DONE]` ended it.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# ----- the shape diff (pure)

# objects whose keys are data (a token's text or id), not field names
TOKEN_KEYED = ("*logprobs.top_logprobs[]", "*prompt_logprobs[]")
CONTAINERS = {"object", "list"}
# fields one server adds on purpose (docs/serve.md, "Conformance with vllm serve"): left out of the report
# unless --all. specroll's: what replays a choice; vLLM's: disaggregated prefill, MoE routing, metrics
KNOWN_EXTRAS = (
    "*.seed",
    "*.sample_index",
    "*.group_id",
    "*.weight_version",
    "*.weight_versions",
    "*.kv_transfer_params",
    "*.ec_transfer_params",
    "*.metrics",
    "*.routed_experts",
    "$.mm_placeholders",
    "$.output_mode",
    "$.prompt_token_id_logprobs",
    "*.sampling_mask",
    "$.error.param",  # specroll names the field at fault where vLLM gives null, and the other way round
)
# requests answered differently on purpose (docs/serve.md says why); the report still lists them
DELIBERATE = {
    "GET /health": "a JSON status (loading, failed, ok) and the weight version where vLLM sends no body",
    "GET /version": "no /version: a specroll version in vLLM's place would mislead a vLLM version check",
    "completion: echo": "echo is refused by name (no RL client asks for it; prompt_logprobs gives the same)",
    "stream completion: logprobs 2": "alternatives come from a scoring forward after a choice: not streamed",
    "stream completion: prompt_logprobs 0": "prompt logprobs come from a scoring forward: not streamed",
    "generate: logprobs 2": "answered with the 2 most likely (a scoring forward); each entry and alternative "
    "also names its token as `token` (`token_id:N`, which prime-rl checks), absent from vLLM 0.32.0's",
    "generate: n=2, logprobs 0": "no `rank` or `top_logprobs` per token at 0 (both need a scoring forward, "
    "as at 2-20); `token` (`token_id:N`) beside `token_id`",
    "bad: unknown field": "an unknown field is refused by name where vLLM ignores it",
    "bad: GET /v1/completions": "a wrong method gets every refusal's error shape (vLLM: FastAPI's `detail`)",
    "bad: unknown route": "an unknown route gets every refusal's error shape (vLLM: FastAPI's `detail`)",
}
# the vLLM series load balancers and RL frameworks read from /metrics (the rest are vLLM's internals)
LOAD_SERIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
)
ABSENT = "absent"  # the key is missing from some of the objects a path merges


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "list" if isinstance(value, list) else "object"


def shape(value: Any, token_keyed: tuple[str, ...] = TOKEN_KEYED) -> dict[str, set[str]]:
    """Every key path of a JSON value and the types seen there: `$` is the root, `a.b` a field,
    `a[]` any item of a list, `a{*}` any value of a token-keyed object; `absent` joins a field's types
    where some objects at its parent path lack it."""
    walk = _Walk(token_keyed)
    walk.visit(value, "$")
    for path, types in walk.types.items():
        parent = _parent(path)
        if parent is not None and walk.present.get(path, 0) < walk.objects.get(parent, 0):
            types.add(ABSENT)
    return walk.types


class _Walk:
    """The types seen at each path, how many objects sat at each path and how many times each field
    path held a value (a field seen fewer times than objects at its parent is sometimes absent)."""

    def __init__(self, token_keyed: tuple[str, ...]) -> None:
        self.token_keyed = token_keyed
        self.types: dict[str, set[str]] = {}
        self.objects: dict[str, int] = {}
        self.present: dict[str, int] = {}

    def visit(self, value: Any, path: str) -> None:
        self.types.setdefault(path, set()).add(type_name(value))
        self.present[path] = self.present.get(path, 0) + 1
        if isinstance(value, list):
            for item in value:
                self.visit(item, f"{path}[]")
        elif isinstance(value, dict) and any(fnmatch.fnmatchcase(path, p) for p in self.token_keyed):
            for item in value.values():
                self.visit(item, f"{path}{{*}}")
        elif isinstance(value, dict):
            self.objects[path] = self.objects.get(path, 0) + 1
            for key, item in value.items():
                self.visit(item, f"{path}.{key}")


def _parent(path: str) -> str | None:
    """The object path a field path hangs from (None for the root, list items and token-keyed values)."""
    if path.endswith("[]") or path.endswith("{*}") or "." not in path:
        return None
    return path.rsplit(".", 1)[0]


@dataclass
class ShapeDiff:
    """How two shapes differ: key paths only in `a`, only in `b`, and paths whose types differ. A path
    under one already reported is left out (a missing object's fields say nothing more)."""

    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    types: list[tuple[str, set[str], set[str]]] = field(default_factory=list)

    @property
    def is_same(self) -> bool:
        return not (self.only_a or self.only_b or self.types)


def diff_shapes(a: dict[str, set[str]], b: dict[str, set[str]]) -> ShapeDiff:
    diff = ShapeDiff()
    reported: list[str] = []  # paths whose fields below are not compared
    for path in sorted(set(a) | set(b), key=_path_order):
        if any(_is_under(path, top) for top in reported):
            continue
        if path not in b:
            diff.only_a.append(path)
            reported.append(path)
        elif path not in a:
            diff.only_b.append(path)
            reported.append(path)
        elif a[path] != b[path]:
            diff.types.append((path, a[path], b[path]))
            if not (a[path] & CONTAINERS and b[path] & CONTAINERS):
                reported.append(path)  # one side holds no object or list here: nothing below to compare
    return diff


def split_known(diff: ShapeDiff, known: tuple[str, ...] = KNOWN_EXTRAS) -> tuple[ShapeDiff, ShapeDiff]:
    """(the differences not in `known`, those in it): `known` holds key path patterns (fnmatch)."""

    def is_known(path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in known)

    parts = ShapeDiff(), ShapeDiff()
    for path in diff.only_a:
        parts[is_known(path)].only_a.append(path)
    for path in diff.only_b:
        parts[is_known(path)].only_b.append(path)
    for row in diff.types:
        parts[is_known(row[0])].types.append(row)
    return parts


def _path_order(path: str) -> tuple[int, str]:
    return (path.count(".") + path.count("[]") + path.count("{*}"), path)


def _is_under(path: str, top: str) -> bool:
    return path.startswith(top) and path[len(top) : len(top) + 1] in (".", "[", "{")


@dataclass
class Answer:
    """One server's answer to one request: the status, the body (parsed JSON, or `EMPTY`/`NOT_JSON`),
    and for a stream its chunks and whether `data: [DONE]` ended it."""

    status: int
    body: Any = None
    events: list[Any] | None = None
    is_done: bool = False


EMPTY = "<empty body>"
NOT_JSON = "<body not JSON>"


def answer_shape(answer: Answer) -> dict[str, set[str]]:
    """The shape compared: a body's under `$` (an empty or non-JSON body is a type of its own), a
    stream's as the module's docstring says."""
    if answer.events is None:
        if answer.body in (EMPTY, NOT_JSON):
            return {"$": {answer.body}}
        return shape(answer.body)
    merged = _rooted(shape(answer.events), "$events")
    if answer.events:
        merged.update(_rooted(shape(answer.events[0]), "$first"))
        merged.update(_rooted(shape(answer.events[-1]), "$last"))
    merged["$done"] = {"[DONE]" if answer.is_done else "missing"}
    return merged


def _rooted(types: dict[str, set[str]], root: str) -> dict[str, set[str]]:
    return {root + path[1:]: t for path, t in types.items()}


@dataclass(frozen=True)
class Observed:
    """What is compared of one answer: its status and shape (a recording keeps only these)."""

    status: int
    shape: dict[str, set[str]]

    @staticmethod
    def of(answer: Answer) -> Observed:
        return Observed(answer.status, answer_shape(answer))

    def to_json(self) -> dict:
        return {"status": self.status, "shape": {p: _fmt(t) for p, t in sorted(self.shape.items())}}

    @staticmethod
    def from_json(row: dict) -> Observed:
        return Observed(int(row["status"]), {p: set(t.split("|")) for p, t in row["shape"].items()})


@dataclass
class Finding:
    """What differs for one request: the two status codes and the shapes' diff."""

    name: str
    status: tuple[int, int]
    diff: ShapeDiff  # the differences reported
    known: ShapeDiff = field(default_factory=ShapeDiff)  # those `KNOWN_EXTRAS` names

    @property
    def is_same(self) -> bool:
        return self.status[0] == self.status[1] and self.diff.is_same


def compare(name: str, a: Observed, b: Observed, known: tuple[str, ...] = KNOWN_EXTRAS) -> Finding:
    diff, expected = split_known(diff_shapes(a.shape, b.shape), known)
    return Finding(name, (a.status, b.status), diff, expected)


def render(findings: list[Finding], names: tuple[str, str], show_known: bool = False) -> str:
    """The report: `=` for a request answered in the same shape, `!` and the differences otherwise
    (with `show_known`, the known extras too, marked `(known)`)."""
    lines = []
    for f in findings:
        why = f"  (deliberate: {DELIBERATE[f.name]})" if f.name in DELIBERATE and not f.is_same else ""
        lines.append(f"{'=' if f.is_same else '!'} {f.name}{why}")
        if f.status[0] != f.status[1]:
            lines.append(f"    status: {names[0]} {f.status[0]}, {names[1]} {f.status[1]}")
        lines += _diff_lines(f.diff, names, "")
        if show_known:
            lines += _diff_lines(f.known, names, "  (known)")
    same = sum(f.is_same for f in findings)
    deliberate = sum(not f.is_same and f.name in DELIBERATE for f in findings)
    lines.append(
        f"{same} of {len(findings)} requests answered in the same shape (known extras aside), "
        f"{deliberate} differ on purpose, {len(findings) - same - deliberate} otherwise"
    )
    return "\n".join(lines)


def _diff_lines(diff: ShapeDiff, names: tuple[str, str], mark: str) -> list[str]:
    a, b = names
    lines = [f"    only {a}: {p}{mark}" for p in diff.only_a]
    lines += [f"    only {b}: {p}{mark}" for p in diff.only_b]
    lines += [f"    type: {p}  {a} {_fmt(ta)}, {b} {_fmt(tb)}{mark}" for p, ta, tb in diff.types]
    return lines


def _fmt(types: set[str]) -> str:
    return "|".join(sorted(types))


def as_json(findings: list[Finding]) -> list[dict]:
    return [
        {"name": f.name, "status": list(f.status), "diff": _diff_json(f.diff), "known": _diff_json(f.known)}
        for f in findings
    ]


def _diff_json(diff: ShapeDiff) -> dict:
    types = [[p, sorted(ta), sorted(tb)] for p, ta, tb in diff.types]
    return {"only_a": diff.only_a, "only_b": diff.only_b, "types": types}


# ----- the requests


@dataclass(frozen=True)
class Probe:
    """One request sent to both servers: `body` a JSON value (`MODEL` stands for each server's model
    name) or raw bytes sent as they are; a 200 to a body with `stream: true` is read as events."""

    name: str
    method: str
    path: str
    body: Any = None

    @property
    def is_stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


MODEL = "<model>"
IDS = [504, 3458, 282, 4649, 314]  # "The capital of France is" in SmolLM2's tokenizer
CHAT = [{"role": "user", "content": "Name a colour."}]


def _completion(name: str, **fields: Any) -> Probe:
    body = {"model": MODEL, "prompt": IDS, "max_tokens": 4, "seed": 7, **fields}
    return Probe(name, "POST", "/v1/completions", {k: v for k, v in body.items() if v is not None})


def _chat(name: str, **fields: Any) -> Probe:
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 4, "seed": 7, **fields}
    return Probe(name, "POST", "/v1/chat/completions", {k: v for k, v in body.items() if v is not None})


def probes(long_prompt: int) -> list[Probe]:
    """The request set; a prompt of `long_prompt` tokens exceeds both servers' context."""
    groups = (_routes(), _completions(), _chats(), _streams(), _generates(), _tokenizer(), _bad(long_prompt))
    return [probe for group in groups for probe in group]


def _routes() -> list[Probe]:
    return [
        Probe("GET /health", "GET", "/health"),
        Probe("GET /v1/models", "GET", "/v1/models"),
        Probe("GET /version", "GET", "/version"),
        Probe("GET /metrics (load series)", "GET", "/metrics"),
    ]


def _completions() -> list[Probe]:
    return [
        _completion("completion: text prompt", prompt="The capital of France is"),
        _completion("completion: token-id prompt"),
        _completion("completion: two prompts", prompt=[IDS, IDS[:3]]),
        _completion("completion: n=3, temperature 1", n=3, temperature=1.0),
        _completion("completion: temperature 0", temperature=0.0),
        _completion("completion: no seed", seed=None),
        _completion("completion: stop strings", stop=["\n", " the"], max_tokens=16),
        _completion("completion: stop_token_ids", stop_token_ids=[2], max_tokens=8),
        _completion("completion: logprobs 0", logprobs=0),
        _completion("completion: logprobs 2", logprobs=2),
        _completion("completion: return_token_ids", return_token_ids=True),
        _completion("completion: prompt_logprobs 1", prompt_logprobs=1),
        _completion("completion: prompt_logprobs 0, logprobs 0", prompt_logprobs=0, logprobs=0),
        _completion("completion: tokens as token ids", logprobs=1, return_tokens_as_token_ids=True),
        _completion("completion: echo", echo=True),
        _completion("completion: request_id", request_id="conformance-1"),
        _completion("completion: no model field", model=None),
    ]


def _chats() -> list[Probe]:
    return [
        _chat("chat: plain"),
        _chat("chat: n=2, temperature 1", n=2, temperature=1.0),
        _chat("chat: logprobs", logprobs=True),
        _chat("chat: logprobs, top_logprobs 2", logprobs=True, top_logprobs=2),
        _chat("chat: max_completion_tokens", max_tokens=None, max_completion_tokens=3),
        _chat("chat: return_token_ids", return_token_ids=True),
        _chat("chat: prompt_logprobs 1", prompt_logprobs=1),
        _chat("chat: no model field", model=None),
    ]


def _streams() -> list[Probe]:
    usage = {"include_usage": True}
    return [
        _completion("stream completion", stream=True),
        _completion("stream completion: n=2, usage", n=2, stream=True, stream_options=usage),
        _completion("stream completion: logprobs 0", stream=True, logprobs=0),
        _completion("stream completion: return_token_ids", stream=True, return_token_ids=True),
        _completion("stream completion: stop string", stream=True, stop=[" the"], max_tokens=16),
        _completion("stream completion: logprobs 2", stream=True, logprobs=2),
        _completion("stream completion: prompt_logprobs 0", stream=True, prompt_logprobs=0),
        _chat("stream chat", stream=True),
        _chat("stream chat: n=2, usage", n=2, stream=True, stream_options=usage),
        _chat("stream chat: logprobs", stream=True, logprobs=True),
    ]


def _generate(name: str, **fields: Any) -> Probe:
    """vLLM's token-in, token-out route (SkyRL's; vLLM serves it with --enable-scale-out)."""
    sampling = {"max_tokens": 4, "seed": 7, **fields.pop("sampling", {})}
    body = {"model": MODEL, "token_ids": IDS, "sampling_params": sampling, **fields}
    return Probe(name, "POST", "/inference/v1/generate", body)


def _generates() -> list[Probe]:
    return [
        _generate("generate: tokens"),
        _generate("generate: n=2, logprobs 0", sampling={"n": 2, "logprobs": 0}),
        _generate("generate: request_id", request_id="conformance-2"),
        _generate("generate: logprobs 2", sampling={"logprobs": 2}),
    ]


def _tokenizer() -> list[Probe]:
    return [
        Probe("tokenize: prompt", "POST", "/tokenize", {"model": MODEL, "prompt": "Hello there"}),
        Probe("tokenize: messages", "POST", "/tokenize", {"model": MODEL, "messages": CHAT}),
        Probe("detokenize", "POST", "/detokenize", {"model": MODEL, "tokens": IDS}),
        Probe("detokenize: bad tokens", "POST", "/detokenize", {"model": MODEL, "tokens": "abc"}),
        Probe("tokenize: missing prompt", "POST", "/tokenize", {"model": MODEL}),
    ]


def _bad(long_prompt: int) -> list[Probe]:
    return [
        _completion("bad: unknown model", model="no-such-model"),
        _completion("bad: missing prompt", prompt=None),
        _completion("bad: prompt too long", prompt=[IDS[0]] * long_prompt),
        _completion("bad: prompt + max_tokens past the context", max_tokens=long_prompt),
        _completion("bad: temperature -1", temperature=-1.0),
        _completion("bad: temperature a string", temperature="hot"),
        _completion("bad: max_tokens 0", max_tokens=0),
        _completion("bad: max_tokens a string", max_tokens="many"),
        _completion("bad: n 0", n=0),
        _completion("bad: top_p 0", top_p=0.0),
        _completion("bad: logprobs 21", logprobs=21),
        _completion("bad: prompt an object", prompt={"text": "hi"}),
        _completion("bad: token id past the vocabulary", prompt=[10**7]),
        _completion("bad: stop a number", stop=5),
        _completion("bad: unknown field", frobnicate=1),
        _chat("bad chat: missing messages", messages=None),
        _chat("bad chat: messages a string", messages="hello"),
        _chat("bad chat: unknown model", model="no-such-model"),
        Probe("bad: malformed JSON", "POST", "/v1/completions", b"{not json"),
        Probe("bad: empty body", "POST", "/v1/completions", b""),
        Probe("bad: body a list", "POST", "/v1/completions", [1, 2]),
        Probe("bad: GET /v1/completions", "GET", "/v1/completions"),
        Probe("bad: unknown route", "POST", "/v1/no-such-route", {}),
    ]


# ----- sending


def _with_model(value: Any, model: str) -> Any:
    if value == MODEL:
        return model
    if isinstance(value, dict):
        return {k: _with_model(v, model) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_model(v, model) for v in value]
    return value


def send(base_url: str, probe: Probe, model: str, timeout: float = 300) -> Answer:
    data = None
    if probe.body is not None:
        data = (
            probe.body
            if isinstance(probe.body, bytes)
            else json.dumps(_with_model(probe.body, model)).encode()
        )
    request = urllib.request.Request(base_url + probe.path, data=data, method=probe.method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    if status == 200 and probe.is_stream:
        return _events(status, raw)
    if status == 200 and probe.path == "/metrics":
        return Answer(status, metric_series(raw.decode(errors="replace")))
    return Answer(status, _body(raw))


def _body(raw: bytes) -> Any:
    if not raw:
        return EMPTY
    try:
        return json.loads(raw)
    except ValueError:
        return NOT_JSON


def metric_series(text: str, names: tuple[str, ...] = LOAD_SERIES) -> dict[str, dict[str, str]]:
    """Prometheus text as a shape can compare it: each series of `names` present and its labels'
    names, as {series: {label: ""}}."""
    series: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        name = name.split(" ")[0]
        if line.startswith("#") or name not in names:
            continue
        labels = rest.split("}")[0] if rest else ""
        keys = [pair.split("=")[0] for pair in labels.split(",") if "=" in pair]
        series.setdefault(name, {}).update(dict.fromkeys(keys, ""))
    return series


def _events(status: int, raw: bytes) -> Answer:
    """Server-sent events: each `data:` line a chunk, `data: [DONE]` the end."""
    answer = Answer(status, events=[])
    for line in raw.decode(errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            answer.is_done = True
        else:
            answer.events.append(_body(payload.encode()))
    return answer


def observe(base_url: str, model: str, long_prompt: int) -> dict[str, Observed]:
    """Every probe's answer from one server, by probe name."""
    return {probe.name: Observed.of(send(base_url, probe, model)) for probe in probes(long_prompt)}


def write_recording(path: Path, observed: dict[str, Observed], version: str, long_prompt: int) -> None:
    """vLLM's answers' shapes, so that specroll can be checked against them where vLLM is not installed."""
    rows = {name: o.to_json() for name, o in observed.items()}
    path.write_text(
        json.dumps({"vllm": version, "long_prompt": long_prompt, "answers": rows}, indent=1) + "\n"
    )


def read_recording(path: Path) -> tuple[dict[str, Observed], str, int]:
    """(the answers' shapes by probe name, vLLM's version, the long prompt's tokens) of a recording."""
    data = json.loads(Path(path).read_text())
    answers = {name: Observed.from_json(row) for name, row in data["answers"].items()}
    return answers, data["vllm"], int(data["long_prompt"])


def compare_all(a: dict[str, Observed], b: dict[str, Observed]) -> list[Finding]:
    return [compare(name, a[name], b[name]) for name in a if name in b]


def context_length(base_url: str) -> int:
    """The served model's `max_model_len` as `/v1/models` reports it (4096 where it says none)."""
    with urllib.request.urlopen(base_url + "/v1/models", timeout=30) as response:
        rows = json.loads(response.read())["data"]
    return int(rows[0].get("max_model_len") or 4096)


def vllm_version(base_url: str) -> str:
    try:
        with urllib.request.urlopen(base_url + "/version", timeout=30) as response:
            return json.loads(response.read()).get("version", "?")
    except (urllib.error.URLError, ValueError, OSError):
        return "?"


# ----- starting both servers


def _free_port() -> int:
    sys.path.insert(0, str(ROOT))
    from specroll.serve.child import free_port

    return free_port()


class Server:
    """A server child in its own process group (vLLM starts engine processes of its own), its output
    in a log file; `stop` ends the group."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name, self.log_path = name, log_path
        self.url = ""
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        raise TimeoutError(f"{self.name} did not answer /health within {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


def start_specroll(args: argparse.Namespace, log_dir: Path) -> Server:
    port = _free_port()
    command = [sys.executable, "-m", "specroll.cli", "serve", "--model", args.model, "--host", "127.0.0.1"]
    command += ["--port", str(port), "--max-model-len", str(args.max_model_len), "--dtype", args.dtype]
    command += ["--served-model-name", args.specroll_model]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    server = Server("specroll serve", command, env, log_dir / "specroll-serve.log")
    server.url = f"http://127.0.0.1:{port}"
    return server


def start_vllm(args: argparse.Namespace, log_dir: Path) -> Server:
    sys.path.insert(0, str(ROOT))
    from specroll.model.catalog import resolve_model_dir

    port = _free_port()
    python = args.vllm_python or str(ROOT / ".venv-vllm" / "bin" / "python")
    command = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(resolve_model_dir(args.model)),
    ]
    command += ["--served-model-name", args.vllm_model, "--dtype", args.dtype, "--enforce-eager"]
    command += ["--max-model-len", str(args.max_model_len), "--max-logprobs", "20", "--seed", "0"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--enable-scale-out"]  # /inference/v1/generate
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: the CPU backend's KV cache
    server = Server("vllm serve", command, env, log_dir / "vllm-serve.log")
    server.url = f"http://127.0.0.1:{port}"
    return server


# ----- the command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specroll-url", help="a running specroll serve, e.g. http://127.0.0.1:8000")
    parser.add_argument("--vllm-url", help="a running vllm serve, e.g. http://127.0.0.1:8001")
    parser.add_argument("--specroll-model", default="smollm2", help="the model name specroll serves")
    parser.add_argument("--vllm-model", default="smollm2", help="the model name vLLM serves")
    parser.add_argument("--start", action="store_true", help="start the servers here, stop them after")
    parser.add_argument("--model", default="smollm2", help="with --start: the catalog model or directory")
    parser.add_argument("--dtype", default="float32", help="with --start: both servers' precision")
    parser.add_argument("--max-model-len", type=int, default=512, help="with --start: both contexts")
    parser.add_argument("--vllm-python", help="with --start: vLLM's Python (default .venv-vllm/bin/python)")
    parser.add_argument("--start-timeout", type=float, default=900, help="seconds to wait for /health")
    parser.add_argument("--log-dir", type=Path, default=Path("."), help="with --start: the servers' logs")
    parser.add_argument("--record", type=Path, help="write vLLM's answers' shapes here (for --against)")
    parser.add_argument("--against", type=Path, help="compare with a recording of vLLM instead of a server")
    parser.add_argument("--json", type=Path, help="also write the findings here as JSON")
    parser.add_argument("--all", action="store_true", help="also list the known extra fields")
    args = parser.parse_args(argv)
    if not args.start and not (args.specroll_url and (args.vllm_url or args.against)):
        parser.error("give --specroll-url and --vllm-url (or --against), or --start")
    if args.against and args.record:
        parser.error("--record needs a vLLM server, not --against")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    servers: list[Server] = []
    try:
        if args.start:
            servers = [start_specroll(args, args.log_dir)]
            servers += [] if args.against else [start_vllm(args, args.log_dir)]
            for server in servers:
                server.wait_healthy(args.start_timeout)
            args.specroll_url = servers[0].url
            args.vllm_url = None if args.against else servers[1].url
        findings, version, vllm_name = _run(args)
    finally:
        for server in servers:
            server.stop()
    print(f"specroll serve {args.specroll_url} vs {vllm_name} (vLLM {version})")
    print(render(findings, ("specroll", "vllm"), show_known=args.all))
    if args.json:
        args.json.write_text(json.dumps(as_json(findings), indent=1))
    return 0


def _run(args: argparse.Namespace) -> tuple[list[Finding], str, str]:
    """(the findings, vLLM's version, what vLLM's side was) for the servers `args` name."""
    specroll_url = args.specroll_url.rstrip("/")
    if args.against:
        recorded, version, long_prompt = read_recording(args.against)
        ours = observe(specroll_url, args.specroll_model, long_prompt)
        return compare_all(ours, recorded), version, f"the recording {args.against}"
    vllm_url = args.vllm_url.rstrip("/")
    long_prompt = max(context_length(url) for url in (specroll_url, vllm_url)) + 8
    ours = observe(specroll_url, args.specroll_model, long_prompt)
    theirs = observe(vllm_url, args.vllm_model, long_prompt)
    version = vllm_version(vllm_url)
    if args.record:
        write_recording(args.record, theirs, version, long_prompt)
    return compare_all(ours, theirs), version, f"vllm serve {vllm_url}"


if __name__ == "__main__":
    sys.exit(main())
