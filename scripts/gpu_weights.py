"""SmolLM2's real weights (and its trained draft head) to a GPU machine, in pieces checked by hash.

A GPU machine is reached by calls that each carry at most 64 MiB (this tree and the paths a call
names), while files that earlier calls left in a folder git ignores stay on the machine as long as it
stays warm. So the checkpoint travels as numbered pieces of at most 48 MiB, one a call, back to back:

    python scripts/gpu_weights.py --pack              # here: bf16 pieces and a manifest (runs/gpu-weights/)
    python scripts/gpu_weights.py --piece 0           # here: stage piece 0 alone in runs/gpu-weights/outgoing
    python3 scripts/gpu_weights.py --receive          # there, carrying runs/gpu-weights/outgoing: keep it
    ...                                               # --piece 1, --receive; ... up to the last piece
    python3 scripts/gpu_weights.py --receive --assemble /tmp/smollm2   # there: rebuild, check every hash

`--pack` converts the model's safetensors to bfloat16 (other files, and `draft-head/` where a head is
installed in the model directory, byte for byte), lays every file end to end and cuts the stream into
pieces; the manifest holds each piece's and each file's size and sha256. `--assemble` needs no torch:
it refuses a missing or corrupt piece by name, rebuilds the files, checks each, and only then moves
the directory into place, where `--model DIR --dtype bfloat16` loads it (and finds `DIR/draft-head`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WORK_DIR = REPO_ROOT / "runs" / "gpu-weights"  # git-ignored: what a call leaves here stays while warm
MANIFEST = "manifest.json"
FORMAT = "specroll-gpu-weights/1"
PIECE_MIB = 48
CALL_LIMIT_MIB = 64  # what one call to the GPU machine carries, this tree included
SKIPPED = {"specroll-manifest.json"}  # a catalog pull's marker: the rebuilt copy is not that pull
HEAD_DIR = "draft-head"


class TransferError(Exception):
    """A piece or file that is missing or does not hash to the manifest's value."""


def sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


# -- packing (here, with torch) ------------------------------------------------------------------


def bundle(model_dir: Path) -> list[tuple[str, bytes]]:
    """Every file the GPU machine needs, as (path relative to the checkpoint, contents), in order."""
    files = [(p.name, _converted(p)) for p in sorted(model_dir.iterdir()) if _is_sent(p)]
    head = model_dir / HEAD_DIR
    if head.is_dir():
        files += [(f"{HEAD_DIR}/{p.name}", p.read_bytes()) for p in sorted(head.iterdir()) if p.is_file()]
    return files


def _is_sent(path: Path) -> bool:
    return path.is_file() and path.name not in SKIPPED


def _converted(path: Path) -> bytes:
    if path.suffix == ".safetensors":
        return bf16_safetensors(path)
    if path.name == "config.json":
        return _bf16_config(path)
    return path.read_bytes()


def bf16_safetensors(path: Path) -> bytes:
    """The file's floating-point tensors rounded to bfloat16 (as `tensor.to(torch.bfloat16)` rounds)."""
    import torch
    from safetensors.torch import load_file, save

    state = load_file(str(path))
    return save({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()})


def _bf16_config(path: Path) -> bytes:
    config = json.loads(path.read_text())
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = "bfloat16"
    return (json.dumps(config, indent=2) + "\n").encode()


def pack(model_dir: Path, work: Path, piece_bytes: int) -> dict:
    """Cut `model_dir`'s bundle into pieces of at most `piece_bytes` under work/pieces; the manifest."""
    files = bundle(model_dir)
    stream = b"".join(data for _, data in files)
    pieces_dir = _fresh(work / "pieces")
    pieces = []
    for index, start in enumerate(range(0, len(stream), piece_bytes)):
        piece = memoryview(stream)[start : start + piece_bytes]
        name = f"piece-{index:02d}.bin"
        (pieces_dir / name).write_bytes(piece)
        pieces.append({"name": name, "bytes": len(piece), "sha256": sha256(piece)})
    manifest = {
        "format": FORMAT,
        "source": model_dir.name,
        "dtype": "bfloat16",
        "pieces": pieces,
        "files": [{"path": path, "bytes": len(data), "sha256": sha256(data)} for path, data in files],
    }
    (pieces_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def stage(work: Path, index: int) -> Path:
    """Piece `index` and the manifest, alone in work/outgoing: the one path the next call carries."""
    pieces_dir = work / "pieces"
    manifest = read_manifest(pieces_dir)
    if not 0 <= index < len(manifest["pieces"]):
        raise TransferError(f"no piece {index}: the manifest lists pieces 0..{len(manifest['pieces']) - 1}")
    outgoing = _fresh(work / "outgoing")
    shutil.copy(pieces_dir / manifest["pieces"][index]["name"], outgoing)
    shutil.copy(pieces_dir / MANIFEST, outgoing)
    return outgoing


# -- receiving and assembling (on the GPU machine, no torch) ---------------------------------------


def receive(work: Path) -> list[str]:
    """Move what this call carried (work/outgoing) into work/received; the pieces still missing."""
    received = work / "received"
    received.mkdir(parents=True, exist_ok=True)
    outgoing = work / "outgoing"
    for path in sorted(outgoing.iterdir()) if outgoing.is_dir() else []:
        shutil.move(str(path), received / path.name)
    if not (received / MANIFEST).is_file():
        return ["the manifest"]
    return [p["name"] for p in read_manifest(received)["pieces"] if not (received / p["name"]).is_file()]


def read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    if not path.is_file():
        raise TransferError(f"{directory} holds no {MANIFEST}: pack first (--pack) or carry a piece")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise TransferError(f"{path} is not a {FORMAT} manifest")
    return manifest


def checked_pieces(received: Path, manifest: dict) -> Iterator[bytes]:
    """Each piece's bytes in order, refused by name where it is missing or does not hash as listed."""
    count = len(manifest["pieces"])
    for index, piece in enumerate(manifest["pieces"]):
        path = received / piece["name"]
        if not path.is_file():
            raise TransferError(f"piece {index} of {count} ({piece['name']}) is missing from {received}")
        data = path.read_bytes()
        if len(data) != piece["bytes"] or sha256(data) != piece["sha256"]:
            raise TransferError(
                f"piece {index} of {count} ({piece['name']}) is corrupt: {len(data)} bytes, sha256 "
                f"{sha256(data)[:16]}..., the manifest says {piece['bytes']} bytes, {piece['sha256'][:16]}..."
            )
        yield data


def assemble(received: Path, out: Path) -> list[str]:
    """Rebuild the checkpoint into `out` from the received pieces, every hash checked; its files."""
    manifest = read_manifest(received)
    stream = b"".join(checked_pieces(received, manifest))
    staging = _fresh(out.with_name(out.name + ".partial"))
    offset = 0
    for entry in manifest["files"]:
        data = memoryview(stream)[offset : offset + entry["bytes"]]
        offset += entry["bytes"]
        if sha256(data) != entry["sha256"]:
            raise TransferError(f"file {entry['path']} does not hash to the manifest's sha256")
        (staging / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
        (staging / entry["path"]).write_bytes(data)
    if offset != len(stream):
        raise TransferError(f"the pieces hold {len(stream) - offset} bytes beyond the manifest's files")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return [entry["path"] for entry in manifest["files"]]


# -- the command line ------------------------------------------------------------------------------


def tree_mib() -> float:
    """What every call carries besides a piece: the tracked and unignored files of this checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    paths = [REPO_ROOT / p for p in listed.split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file()) / 2**20


def _report_pack(manifest: dict, work: Path, piece_bytes: int) -> None:
    count, total = len(manifest["pieces"]), sum(p["bytes"] for p in manifest["pieces"])
    files = ", ".join(f"{f['path']} ({f['bytes'] / 2**20:.1f} MiB)" for f in manifest["files"])
    print(f"packed {manifest['source']} in {manifest['dtype']}: {files}")
    print(f"{count} pieces, {total / 2**20:.1f} MiB in all, under {work / 'pieces'}")
    carried = tree_mib() + piece_bytes / 2**20
    print(f"each call carries about {carried:.1f} MiB: this tree and one piece (at most {CALL_LIMIT_MIB})")
    if carried > CALL_LIMIT_MIB:
        print(f"warning: over {CALL_LIMIT_MIB} MiB a call: pack again with a smaller --piece-mib")
    outgoing = (work / "outgoing").relative_to(REPO_ROOT) if work.is_relative_to(REPO_ROOT) else work
    print(
        f"then for N in 0..{count - 1}, back to back: here `--piece N`; there, in a call carrying "
        f"{outgoing}, `python3 scripts/gpu_weights.py --receive` (the last call adds `--assemble DIR`)"
    )


def _pack_command(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO_ROOT))
    from specroll.model.catalog import resolve_model_dir

    piece_bytes = int(args.piece_mib * 2**20)
    manifest = pack(resolve_model_dir(args.model), args.work, piece_bytes)
    _report_pack(manifest, args.work, piece_bytes)


def _run(args: argparse.Namespace) -> None:
    if args.pack:
        _pack_command(args)
    if args.piece is not None:
        outgoing = stage(args.work, args.piece)
        print(f"staged piece {args.piece} in {outgoing}: the path the next call carries")
    if args.receive:
        missing = receive(args.work)
        print(f"received in {args.work / 'received'}; missing: {', '.join(missing) or 'none'}")
    if args.assemble:
        files = assemble(args.work / "received", args.assemble)
        print(f"assembled {args.assemble}: {len(files)} files, every piece and file matching its sha256")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        _run(args)
    except TransferError as err:
        print(f"gpu_weights: {err}", file=sys.stderr)
        return 1
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", action="store_true", help="cut the model's bf16 checkpoint into pieces")
    parser.add_argument("--model", default="smollm2", help="a catalog name or checkpoint directory")
    parser.add_argument("--piece-mib", type=float, default=PIECE_MIB, help="the largest piece, in MiB")
    parser.add_argument("--piece", type=int, default=None, help="stage piece N alone for the next call")
    parser.add_argument("--receive", action="store_true", help="on the GPU machine: keep the carried piece")
    parser.add_argument("--assemble", type=Path, default=None, help="on the GPU machine: rebuild into DIR")
    parser.add_argument("--work", type=Path, default=WORK_DIR, help="the git-ignored folder of the pieces")
    args = parser.parse_args(argv)
    if not (args.pack or args.piece is not None or args.receive or args.assemble):
        parser.error("nothing to do: --pack, --piece N, --receive or --assemble DIR")
    return args


if __name__ == "__main__":
    sys.exit(main())
