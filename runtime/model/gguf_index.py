"""A GGUF file's tensors and scalar metadata, read without parsing its arrays.

gguf.GGUFReader reads every metadata value into numpy views, one per string: for a tokenizer of
49k tokens and as many merges that takes ~3 s, and loading a quantized model needs only the
tensors and a few numbers. GGUFIndex walks the metadata with struct, keeps scalars and strings,
records arrays by their length only, and maps the tensor data once.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

import numpy as np

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# value type -> struct format, for the fixed-size types
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


class GGUFFormatError(ValueError):
    pass


@dataclass
class ArrayField:
    """A metadata array, known by its item type and length only."""

    item_type: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass
class TensorInfo:
    """As gguf.ReaderTensor: `shape` lists dimensions fastest-first, `data` is a view of the
    file (float32/float16 values, or a row of raw blocks per weight row)."""

    name: str
    shape: tuple[int, ...]
    tensor_type: object  # gguf.GGMLQuantizationType
    data: np.ndarray


class GGUFIndex:
    def __init__(self, path: str):
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self._map
        if buf[:4] != _MAGIC:
            raise GGUFFormatError(f"{path} is not a GGUF file")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if not 2 <= version <= 3:
            raise GGUFFormatError(f"GGUF version {version} is not supported")
        self._pos = 24
        self.fields: dict[str, object] = {}
        for _ in range(n_kv):
            key = self._string()
            (kind,) = self._unpack("<I")
            self.fields[key] = self._value(kind)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            dims = self._unpack(f"<{n_dims}Q")
            kind, offset = self._unpack("<IQ")
            infos.append((name, dims, kind, offset))
        alignment = self.fields.get("general.alignment", 32)
        start = -(-self._pos // alignment) * alignment
        data = np.frombuffer(buf, np.uint8)
        self.tensors: list[TensorInfo] = []
        for name, dims, kind, offset in infos:
            qtype = GGMLQuantizationType(kind)
            shape = [int(d) for d in reversed(dims)]  # slowest-first, as numpy lays it out
            count = int(np.prod(shape)) if shape else 1
            if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                dtype = np.float32 if qtype == GGMLQuantizationType.F32 else np.float16
                size = count * np.dtype(dtype).itemsize
                view = data[start + offset : start + offset + size].view(dtype).reshape(shape)
            else:
                block, type_size = GGML_QUANT_SIZES[qtype]
                shape[-1] = shape[-1] // block * type_size
                size = count // block * type_size
                view = data[start + offset : start + offset + size].reshape(shape)
            self.tensors.append(TensorInfo(name, tuple(int(d) for d in dims), qtype, view))

    def _unpack(self, fmt: str) -> tuple:
        out = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return out

    def _string(self) -> str:
        (n,) = self._unpack("<Q")
        raw = self._map[self._pos : self._pos + n]
        self._pos += n
        return raw.decode("utf-8", errors="replace")

    def _value(self, kind: int):
        if kind in _SCALARS:
            return self._unpack("<" + _SCALARS[kind])[0]
        if kind == _STRING:
            return self._string()
        if kind != _ARRAY:
            raise GGUFFormatError(f"unknown GGUF value type {kind}")
        item, length = self._unpack("<IQ")
        if item in _SCALARS:  # skipped whole
            self._pos += struct.calcsize("<" + _SCALARS[item]) * length
        else:
            for _ in range(length):
                self._skip(item)
        return ArrayField(item, length)

    def _skip(self, kind: int) -> None:
        if kind == _STRING:
            (n,) = struct.unpack_from("<Q", self._map, self._pos)
            self._pos += 8 + n
        else:
            self._value(kind)
