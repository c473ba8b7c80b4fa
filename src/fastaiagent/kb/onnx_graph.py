"""The BERT encoder as an ONNX graph, built from safetensors weights: no torch, no ``onnx``.

What it computes is the Hugging Face ``BertModel``'s ``last_hidden_state`` (the
sentence-transformers ``Transformer`` module): token, position and token-type
embeddings, their LayerNorm, then per layer self-attention (the padding masked
out) and a GELU feed-forward, each added to its input and normalised. The
pooling and the L2 normalisation run after it (:mod:`fastaiagent.kb.onnx_embedding`).

:func:`readable` says which models it builds: a BERT (``config.json``:
``model_type`` bert, absolute positions, erf GELU) whose sentence-transformers
pipeline is the encoder, mean pooling and at most a normalisation, with
float32 or float16 safetensors weights. Anything else runs on torch.
The graph is plain ONNX operators (opset 17), written by
:mod:`fastaiagent.kb.onnx_proto`; ONNX Runtime fuses them as it loads it.
"""

from __future__ import annotations

import math
from typing import Any

from fastaiagent._optional import require
from fastaiagent.errors import InvalidValueError
from fastaiagent.kb import onnx_proto
from fastaiagent.kb.model_files import WEIGHTS, ModelFiles

GRAPH_VERSION = 2  # part of the cached graph's name: bump when the graph built changes
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "hidden"
_OPSET = 17  # LayerNormalization; ONNX Runtime >= 1.14 runs it
_IR_VERSION = 8  # what ONNX Runtime >= 1.14 reads, whatever onnx version writes it
_PIPELINE = {"Transformer", "Pooling", "Normalize"}
_MEAN_ONLY = {
    "pooling_mode_mean_tokens": True,
    "pooling_mode_cls_token": False,
    "pooling_mode_max_tokens": False,
    "pooling_mode_mean_sqrt_len_tokens": False,
}


def readable(files: ModelFiles) -> dict[str, Any]:
    """The model's ``config.json`` when the graph builder reads this model; else
    InvalidValueError saying why and naming the torch backend."""
    config = files.read_json("config.json")
    problems = []
    if config.get("model_type") != "bert":
        problems.append(f"model_type {config.get('model_type')!r} is not 'bert'")
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type {config['position_embedding_type']!r}")
    if config.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act {config['hidden_act']!r} is not 'gelu'")
    modules = files.read_json("modules.json", default=[])
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if not set(kinds) <= _PIPELINE:
        problems.append(f"modules {kinds} are more than Transformer, Pooling, Normalize")
    pooling = next((m.get("path", "") for m in modules if str(m.get("type", "")).endswith("Pooling")), None)
    if pooling is not None:
        settings = files.read_json(f"{pooling}/config.json" if pooling else "config.json")
        if any(bool(settings.get(key, False)) != want for key, want in _MEAN_ONLY.items()):
            problems.append("its pooling is not mean pooling")
    if not files.exists(WEIGHTS):
        problems.append(f"it has no {WEIGHTS}")
    if problems:
        raise InvalidValueError(
            f"the ONNX backend cannot read the model at {files.location}: {'; '.join(problems)}; "
            "use LocalEmbedder(backend='torch') with pip install 'fastaiagent[torch]'"
        )
    return config


def build_graph(files: ModelFiles, external: onnx_proto.ExternalData | None = None) -> onnx_proto.Chunks:
    """The ONNX model of the encoder in ``files``, serialised as chunks to write in order
    (inputs :data:`INPUTS`, int64 ``[batch, tokens]``; output :data:`OUTPUT`, float32
    ``[batch, tokens, hidden]``); its large weights go to ``external`` when given."""
    config = readable(files)
    np = require("numpy", "local")
    weights = {name.removeprefix("bert."): value for name, value in files.tensors().items()}
    graph = _Builder(np, weights, external)
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    eps = float(config.get("layer_norm_eps", 1e-12))

    x = graph.embeddings(eps)
    mask = graph.mask_bias()
    for layer in range(int(config["num_hidden_layers"])):
        x = graph.layer(f"encoder.layer.{layer}", x, mask, hidden, heads, eps)
    graph.nodes.append(onnx_proto.node("Identity", [x], [OUTPUT]))
    tokens = ["batch", "tokens"]
    return onnx_proto.model(
        graph.nodes,
        graph.initializers,
        [onnx_proto.value_info(name, onnx_proto.INT64, tokens) for name in INPUTS],
        [onnx_proto.value_info(OUTPUT, onnx_proto.FLOAT, [*tokens, hidden])],
        name="bert_encoder",
        opset=_OPSET,
        ir_version=_IR_VERSION,
        producer="fastaiagent",
    )


class _Builder:
    """Appends nodes and initialisers; each helper returns the name of its output."""

    def __init__(self, np: Any, weights: dict[str, Any], external: onnx_proto.ExternalData | None) -> None:
        self.np, self.weights, self.external = np, weights, external
        self.nodes: list[bytes] = []
        self.initializers: list[onnx_proto.Chunks] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, value: Any, hint: str = "const") -> str:
        name = self._name(hint)
        self.initializers.append(onnx_proto.tensor(name, self.np.asarray(value), self.external))
        return name

    def scalar(self, value: float) -> str:
        return self.const(self.np.float32(value))

    def ints(self, *values: int) -> str:
        return self.const(self.np.array(values if len(values) > 1 else values[0], dtype="int64"))

    def weight(self, name: str, transpose: bool = False) -> str:
        if name not in self.weights:
            raise InvalidValueError(f"the model's {WEIGHTS} has no tensor {name!r}; use backend='torch'")
        value = self.weights[name].astype("float32", copy=False)
        return self.const(self.np.ascontiguousarray(value.T if transpose else value), name)

    def op(self, kind: str, inputs: list[str], **attributes: Any) -> str:
        out = self._name(kind.lower())
        self.nodes.append(onnx_proto.node(kind, inputs, [out], **attributes))
        return out

    def linear(self, x: str, prefix: str) -> str:
        """``x @ W.T + b`` (torch's Linear keeps W as [out, in])."""
        product = self.op("MatMul", [x, self.weight(f"{prefix}.weight", transpose=True)])
        return self.op("Add", [product, self.weight(f"{prefix}.bias")])

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        scale, bias = self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)

    def embeddings(self, eps: float) -> str:
        words = self.op("Gather", [self.weight("embeddings.word_embeddings.weight"), "input_ids"])
        length = self.op("Shape", ["input_ids"], start=1, end=2)
        positions = self.op("Range", [self.ints(0), self.op("Squeeze", [length]), self.ints(1)])
        where = self.op("Gather", [self.weight("embeddings.position_embeddings.weight"), positions])
        kinds = self.op("Gather", [self.weight("embeddings.token_type_embeddings.weight"), "token_type_ids"])
        total = self.op("Add", [self.op("Add", [words, where]), kinds])
        return self.layer_norm(total, "embeddings.LayerNorm", eps)

    def mask_bias(self) -> str:
        """``[batch, 1, 1, tokens]``: 0 where a token is, the float32 minimum on padding
        (what BertModel adds to the attention scores)."""
        mask = self.op("Cast", ["attention_mask"], to=onnx_proto.FLOAT)
        inverted = self.op("Sub", [self.scalar(1.0), mask])
        bias = self.op("Mul", [inverted, self.scalar(self.np.finfo("float32").min)])
        return self.op("Unsqueeze", [bias, self.ints(1, 2)])

    def layer(self, prefix: str, x: str, mask: str, hidden: int, heads: int, eps: float) -> str:
        size = hidden // heads
        split = self.ints(0, 0, heads, size)
        merge = self.ints(0, 0, hidden)

        def heads_of(name: str, perm: list[int]) -> str:
            projected = self.linear(x, f"{prefix}.attention.self.{name}")
            return self.op("Transpose", [self.op("Reshape", [projected, split])], perm=perm)

        query = heads_of("query", [0, 2, 1, 3])  # [batch, heads, tokens, size]
        key = heads_of("key", [0, 2, 3, 1])  # [batch, heads, size, tokens]
        value = heads_of("value", [0, 2, 1, 3])
        scores = self.op("MatMul", [query, key])
        scaled = self.op("Mul", [scores, self.scalar(1.0 / math.sqrt(size))])
        weights = self.op("Softmax", [self.op("Add", [scaled, mask])], axis=-1)
        context = self.op("Transpose", [self.op("MatMul", [weights, value])], perm=[0, 2, 1, 3])
        attended = self.linear(self.op("Reshape", [context, merge]), f"{prefix}.attention.output.dense")
        x = self.layer_norm(self.op("Add", [attended, x]), f"{prefix}.attention.output.LayerNorm", eps)

        inner = self.linear(x, f"{prefix}.intermediate.dense")
        # GELU, erf form: x * 0.5 * (1 + erf(x / sqrt 2))
        erf = self.op("Erf", [self.op("Mul", [inner, self.scalar(1 / math.sqrt(2))])])
        half = self.op("Mul", [inner, self.scalar(0.5)])
        gelu = self.op("Mul", [half, self.op("Add", [erf, self.scalar(1.0)])])
        out = self.linear(gelu, f"{prefix}.output.dense")
        return self.layer_norm(self.op("Add", [out, x]), f"{prefix}.output.LayerNorm", eps)


__all__ = ["GRAPH_VERSION", "INPUTS", "OUTPUT", "build_graph", "readable"]
