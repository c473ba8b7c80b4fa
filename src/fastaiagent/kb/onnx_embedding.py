"""The offline MiniLM on ONNX Runtime: the same vectors, faster on a CPU, lighter to start.

``LocalEmbedder(backend="onnx")`` (or ``"auto"``: when ``onnxruntime`` is installed)
runs the bundled all-MiniLM-L6-v2 weights through ONNX Runtime. The ONNX graph is exported
from those same weights once per machine (torch and ``onnx`` are needed for that
step only) into ``$FASTAIAGENT_CACHE_DIR`` (default ``~/.cache/fastaiagent``),
written to a temporary file and renamed, so concurrent processes never read half
a file. Later processes load just the graph and the tokenizer: no torch import.

The pipeline is the model's own (sentence-transformers' modules.json): the BERT
encoder, mean pooling over the attention mask, L2 normalisation, inputs cut at
the model's ``max_seq_length``; vectors match sentence-transformers' to ~1e-7.
Texts are embedded shortest first, so a batch pads to a similar length.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from fastaiagent._optional import require

CACHE_ENV = "FASTAIAGENT_CACHE_DIR"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_LOCK = threading.Lock()
_MODELS: dict[str, OnnxModel] = {}


def cache_dir() -> Path:
    """``$FASTAIAGENT_CACHE_DIR``, else ``~/.cache/fastaiagent``."""
    given = os.environ.get(CACHE_ENV)
    return Path(given).expanduser() if given else Path.home() / ".cache" / "fastaiagent"


def graph_path(model_dir: str) -> Path:
    """Where the ONNX graph of the weights in ``model_dir`` is kept (named by their hash,
    so other weights never load a stale graph)."""
    weights = Path(model_dir) / "model.safetensors"
    stamp = f"{weights.resolve()}:{weights.stat().st_size}:{weights.stat().st_mtime_ns}"
    return cache_dir() / "onnx" / f"minilm-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.onnx"


def export_graph(model_dir: str, target: Path, sentence_model: Any) -> None:
    """Export ``sentence_model``'s encoder (loaded from ``model_dir``) to ``target``."""
    torch = require("torch", "local")
    require("onnx", "local")
    encoder = sentence_model[0].auto_model.eval()

    module: Any = torch.nn.Module

    class Encoder(module):  # keyword arguments: BertModel's positional order varies
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state

    sample = sentence_model.tokenizer(["an example", "another example text"], padding=True, return_tensors="pt")
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(handle)
    try:
        axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "hidden")}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes are for model authors
            torch.onnx.export(
                Encoder(), tuple(sample[name] for name in _INPUTS), temporary,
                input_names=list(_INPUTS), output_names=["hidden"], dynamic_axes=axes,
                opset_version=17, dynamo=False,
            )  # fmt: skip
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


ONE_THREAD_TEXTS = 4  # a call with this many texts or fewer runs on one thread


class OnnxModel:
    """The exported encoder, its tokenizer and the pooling, ready to embed."""

    def __init__(self, model_dir: str, graph: Path) -> None:
        ort = require("onnxruntime", "local")
        tokenizers = require("tokenizers", "local")
        self._np = require("numpy", "local")
        # Batches on every core; a query (up to ONE_THREAD_TEXTS texts) on one thread of
        # its own session: it gains little from a second one and, on a busy machine,
        # waits for it.
        self.session = _session(ort, graph, os.cpu_count() or 1)
        self.single = _session(ort, graph, 1)
        config = json.loads((Path(model_dir) / "sentence_bert_config.json").read_text())
        self.tokenizer = tokenizers.Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
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

    def _batch(self, texts: list[str]) -> Any:
        np = self._np
        session = self.single if len(texts) <= ONE_THREAD_TEXTS else self.session
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


def load_onnx_model(model_dir: str, load_sentence_model: Any) -> OnnxModel:
    """The process-wide ONNX model of ``model_dir``, exported first if this machine
    has no graph yet (``load_sentence_model()`` gives the torch model to export)."""
    model = _MODELS.get(model_dir)
    if model is not None:
        return model
    with _LOCK:
        model = _MODELS.get(model_dir)
        if model is None:
            graph = graph_path(model_dir)
            if not graph.exists():
                export_graph(model_dir, graph, load_sentence_model())
            model = _MODELS[model_dir] = OnnxModel(model_dir, graph)
    return model


def onnx_runtime_installed() -> bool:
    """Whether ONNX Runtime and the tokenizers package can be imported."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "tokenizers"))


__all__ = ["CACHE_ENV", "ONE_THREAD_TEXTS", "OnnxModel", "cache_dir", "graph_path", "load_onnx_model", "onnx_runtime_installed"]
