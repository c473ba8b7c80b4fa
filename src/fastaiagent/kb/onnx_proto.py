"""Just enough of the ONNX protobuf format to write a model, without the ``onnx`` package.

``onnx`` costs ~30 MB installed and ~0.9 s to import; a graph of plain
operators with float32 / int64 initialisers needs a few messages of
``onnx.proto``, written here field by field in protobuf's wire format
(varints and length-prefixed fields). Field numbers are those of ``onnx.proto``;
the tests read what this writes back with ``onnx.checker``.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from typing import Any

from fastaiagent.errors import InvalidValueError

FLOAT, INT64 = 1, 7  # TensorProto.DataType
_DATA_TYPES = {"float32": FLOAT, "int64": INT64}
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7  # AttributeProto.AttributeType
_EXTERNAL = 1  # TensorProto.DataLocation


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 is its two's complement: ten bytes
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _text(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(field << 3 | 2) + _varint(len(data)) + data


Chunks = list[bytes | memoryview]
"""A message as pieces to write one after another: a model's weights are never
copied into one buffer (on a slow machine each 90 MB copy costs 0.1-0.3 s)."""


def _message(field: int, chunks: Chunks) -> Chunks:
    """``chunks`` as the length-delimited field ``field`` (every memoryview is of bytes)."""
    return [_varint(field << 3 | 2) + _varint(sum(len(c) for c in chunks)), *chunks]


class ExternalData:
    """Large tensors' bytes for a file beside the graph, each at an offset that is a
    multiple of 64 KiB: ONNX Runtime then maps the file instead of copying the weights
    out of the graph (a session loads in about half the time)."""

    ALIGN = 65536
    SMALLEST = 4096  # smaller tensors stay in the graph

    def __init__(self, location: str) -> None:
        self.location = location  # the file's name, relative to the graph's folder
        self.chunks: Chunks = []
        self.size = 0

    def add(self, data: memoryview) -> int:
        """Append ``data`` (aligned); its offset."""
        pad = -self.size % self.ALIGN
        if pad:
            self.chunks.append(bytes(pad))
        offset = self.size + pad
        self.chunks.append(data)
        self.size = offset + len(data)
        return offset


def tensor(name: str, array: Any, external: ExternalData | None = None) -> Chunks:
    """A TensorProto holding ``array`` (float32 or int64, C-contiguous, native little-endian):
    its own memory, not a copy, as raw data or, when large and ``external`` is given, there."""
    if str(array.dtype) not in _DATA_TYPES or not array.flags.c_contiguous or sys.byteorder != "little":
        raise InvalidValueError(f"tensor {name!r}: a C-contiguous float32 or int64 array on a little-endian machine")
    head = b"".join(_int(1, d) for d in array.shape) + _int(2, _DATA_TYPES[str(array.dtype)]) + _text(8, name)
    data = memoryview(array.reshape(-1)).cast("B")
    if external is None or len(data) < external.SMALLEST:
        return [head, *_message(9, [data])]
    where = {"location": external.location, "offset": external.add(data), "length": len(data)}
    entries = b"".join(_text(13, _text(1, key) + _text(2, str(value))) for key, value in where.items())
    return [head + entries + _int(14, _EXTERNAL)]


def _attribute(name: str, value: int | float | Sequence[int]) -> bytes:
    if isinstance(value, float):
        return _text(1, name) + _int(20, _ATTR_FLOAT) + _varint(2 << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, int):
        return _text(1, name) + _int(20, _ATTR_INT) + _int(3, value)
    return _text(1, name) + _int(20, _ATTR_INTS) + b"".join(_int(8, v) for v in value)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attributes: Any) -> bytes:
    """A NodeProto of the default domain; ``attributes`` are floats, ints or lists of ints."""
    return (
        b"".join(_text(1, i) for i in inputs)
        + b"".join(_text(2, o) for o in outputs)
        + _text(4, op_type)
        + b"".join(_text(5, _attribute(k, v)) for k, v in sorted(attributes.items()))
    )


def value_info(name: str, elem_type: int, shape: Sequence[int | str]) -> bytes:
    """A ValueInfoProto: a tensor input or output, each dimension a size or a name."""
    dims = b"".join(_text(1, _int(1, d) if isinstance(d, int) else _text(2, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _text(2, dims)
    return _text(1, name) + _text(2, _text(1, tensor_type))


def model(
    nodes: Sequence[bytes],
    initializers: Sequence[Chunks],
    inputs: Sequence[bytes],
    outputs: Sequence[bytes],
    *,
    name: str,
    opset: int,
    ir_version: int,
    producer: str,
) -> Chunks:
    """A ModelProto of one graph, as chunks to write in order (``b"".join`` them for bytes)."""
    graph: Chunks = [b"".join(_text(1, n) for n in nodes) + _text(2, name)]
    for initializer in initializers:
        graph += _message(5, initializer)
    graph.append(b"".join(_text(11, i) for i in inputs) + b"".join(_text(12, o) for o in outputs))
    opset_id = _text(1, "") + _int(2, opset)
    return [_int(1, ir_version) + _text(2, producer), *_message(7, graph), _text(8, opset_id)]


__all__ = ["FLOAT", "INT64", "Chunks", "ExternalData", "model", "node", "tensor", "value_info"]
