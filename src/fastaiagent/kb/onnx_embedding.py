"""The offline MiniLM on ONNX Runtime: the same vectors as torch, faster on a CPU, no torch.

``LocalEmbedder(backend="onnx")`` (or ``"auto"``: when ``onnxruntime`` is installed)
runs the model's weights through ONNX Runtime. The ONNX graph is built from
those weights without torch or ``onnx`` (:mod:`fastaiagent.kb.onnx_graph`) once
per machine into ``$FASTAIAGENT_CACHE_DIR`` (default ``~/.cache/fastaiagent``): the
graph and, beside it, its weights (which ONNX Runtime maps rather than copies),
each written to a temporary file and renamed, so concurrent processes never read
half a file. Later processes load just the graph and the tokenizer.

The pipeline is the model's own (sentence-transformers' modules.json): the BERT
encoder, mean pooling over the attention mask, L2 normalisation, inputs cut at
the model's ``max_seq_length``; vectors match sentence-transformers' to ~1e-6.
Texts are embedded shortest first, so a batch pads to a similar length.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from fastaiagent._optional import require
from fastaiagent.kb import onnx_graph, onnx_proto
from fastaiagent.kb.model_files import ModelFiles

CACHE_ENV = "FASTAIAGENT_CACHE_DIR"
_LOCK = threading.Lock()
_MODELS: dict[str, OnnxModel] = {}


def cache_dir() -> Path:
    """``$FASTAIAGENT_CACHE_DIR``, else ``~/.cache/fastaiagent``."""
    given = os.environ.get(CACHE_ENV)
    return Path(given).expanduser() if given else Path.home() / ".cache" / "fastaiagent"


def graph_path(files: ModelFiles) -> Path:
    """Where the ONNX graph of the weights in ``files`` is kept (named by their stamp and
    the builder's version, so other weights or another builder never load a stale graph)."""
    stamp = f"{files.stamp()}:graph-v{onnx_graph.GRAPH_VERSION}"
    return cache_dir() / "onnx" / f"encoder-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.onnx"


def weights_path(graph: Path) -> Path:
    """The file of the graph's large weights, beside it (ONNX Runtime maps it)."""
    return graph.with_suffix(".data")


def write_graph(files: ModelFiles, target: Path) -> None:
    """Build the graph of ``files`` into ``target`` and its weights beside it, each written
    to a temporary file and renamed, the weights first: a graph that exists has its weights."""
    external = onnx_proto.ExternalData(weights_path(target).name)
    graph = onnx_graph.build_graph(files, external)
    target.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(weights_path(target), external.chunks)
    _write_atomically(target, graph)


def _write_atomically(target: Path, chunks: onnx_proto.Chunks) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.writelines(chunks)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


ONE_THREAD_TEXTS = 4  # a call with this many texts or fewer runs on one thread


class OnnxModel:
    """The encoder's graph, its tokenizer and the pooling, ready to embed."""

    def __init__(self, files: ModelFiles, graph: Path) -> None:
        ort = require("onnxruntime", "local")
        tokenizers = require("tokenizers", "local")
        self._np = require("numpy", "local")
        # A query (up to ONE_THREAD_TEXTS texts) runs on one thread of its own session: it
        # gains little from a second one and, on a busy machine, waits for it. Batches run
        # on every core, in a session made on the first batch (a query never waits for it).
        self._ort, self._graph = ort, graph
        self.single = _session(ort, graph, 1)
        self._batches: Any = None
        self._batches_lock = threading.Lock()
        config = files.read_json("sentence_bert_config.json", default={})
        self.tokenizer = tokenizers.Tokenizer.from_str(files.read_bytes("tokenizer.json").decode())
        self.tokenizer.enable_truncation(max_length=int(config.get("max_seq_length", 256)))
        self.tokenizer.enable_padding()

    def encode(self, texts: list[str], batch_size: int) -> Any:
        """L2-normalised float32 vectors for ``texts``, in order."""
        np = self._np
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), 0), dtype="float32")
        for first in range(0, len(order), batch_size):
            rows = order[first : first + batch_size]
            vectors = self._batch([texts[i] for i in rows])
            if out.shape[1] == 0:
                out = np.empty((len(texts), vectors.shape[1]), dtype="float32")
            out[rows] = vectors
        return out

    def _batch_session(self) -> Any:
        if self._batches is None:
            with self._batches_lock:
                if self._batches is None:
                    threads = os.cpu_count() or 1
                    self._batches = self.single if threads == 1 else _session(self._ort, self._graph, threads)
        return self._batches

    def _batch(self, texts: list[str]) -> Any:
        np = self._np
        session = self.single if len(texts) <= ONE_THREAD_TEXTS else self._batch_session()
        encoded = self.tokenizer.encode_batch(texts)
        feeds = {
            "input_ids": np.array([e.ids for e in encoded], dtype="int64"),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype="int64"),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype="int64"),
        }
        hidden = session.run(None, feeds)[0]
        mask = feeds["attention_mask"][..., None].astype("float32")
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype("float32")


def _session(ort: Any, graph: Path, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def load_onnx_model(files: ModelFiles) -> OnnxModel:
    """The process-wide ONNX model of ``files``, its graph built first if this machine
    has none yet."""
    key = files.stamp()
    model = _MODELS.get(key)
    if model is not None:
        return model
    with _LOCK:
        model = _MODELS.get(key)
        if model is None:
            graph = graph_path(files)
            if not (graph.exists() and weights_path(graph).exists()):
                write_graph(files, graph)
            model = _MODELS[key] = OnnxModel(files, graph)
    return model


def onnx_runtime_installed() -> bool:
    """Whether ONNX Runtime and the tokenizers package can be imported."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "tokenizers"))


__all__ = [
    "CACHE_ENV",
    "ONE_THREAD_TEXTS",
    "OnnxModel",
    "cache_dir",
    "graph_path",
    "load_onnx_model",
    "onnx_runtime_installed",
    "weights_path",
    "write_graph",
]
