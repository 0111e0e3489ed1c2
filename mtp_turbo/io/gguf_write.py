"""Writing GGUF files through the `gguf` package's GGUFWriter.

Owns: mapping python/numpy metadata values to GGUF value types and handing tensors over as raw
bytes with their ggml type (quantized blocks stay byte-exact). Ignores: reading (gguf_file.py).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .gguf_header import ARRAY_TYPE, GGML_TYPES, SCALAR_TYPES, STRING_TYPE  # the value-type table the reader uses

def _value_type(v: Any) -> tuple[Any, int, int | None]:
    """(value for the writer, GGUF value type, array element type) for one metadata value."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v), 7, None
    if isinstance(v, np.generic):
        for vt, (_, dt) in SCALAR_TYPES.items():
            if v.dtype == dt:
                return v.item(), vt, None
        raise ValueError(f"no GGUF type for numpy scalar {v.dtype}")
    if isinstance(v, int):
        if 0 <= v < 1 << 32:
            return v, 4, None
        if -(1 << 31) <= v < 0:
            return v, 5, None
        return v, (10 if v >= 0 else 11), None
    if isinstance(v, float):
        return v, 6, None
    if isinstance(v, (str, bytes)):
        return v, STRING_TYPE, None
    if isinstance(v, np.ndarray):
        if v.size == 0:
            raise ValueError("empty metadata arrays cannot be written by gguf.GGUFWriter")
        for vt, (_, dt) in SCALAR_TYPES.items():
            if v.dtype == dt:
                return v.tolist(), ARRAY_TYPE, vt
        raise ValueError(f"no GGUF type for numpy array of {v.dtype}")
    if isinstance(v, (list, tuple)):
        if not v:
            raise ValueError("empty metadata arrays cannot be written by gguf.GGUFWriter")
        items = [_value_type(x) for x in v]
        kinds = {(vt, st) for _, vt, st in items}
        if len(kinds) > 1:
            if all(vt in (4, 5, 10, 11) for vt, _ in kinds):  # mixed ints: widen to one type
                vt = 11 if any(x < 0 for x in v) else 10
                return list(v), ARRAY_TYPE, vt
            raise ValueError(f"metadata array mixes value types {sorted(kinds, key=str)}")
        vt, st = kinds.pop()
        if vt == ARRAY_TYPE:
            raise ValueError("nested metadata arrays are not supported by write_gguf")
        return [x for x, _, _ in items], ARRAY_TYPE, vt
    raise ValueError(f"no GGUF type for metadata value of type {type(v).__name__}")


def write_gguf(path: str | os.PathLike[str], arch: str, metadata: dict[str, Any],
               tensors: dict[str, tuple[np.ndarray, int, tuple[int, ...]]]) -> None:
    """Write a little-endian GGUF v3 file with gguf.GGUFWriter.

    metadata: python ints become UINT32 (INT32 if negative, 64-bit if they do not fit), floats
    FLOAT32; numpy scalars/arrays keep their exact type. general.architecture comes from `arch`.
    tensors: name -> (raw bytes as a uint8 array, ggml type, torch-order shape); the bytes are
    written as they are, with the writer recording the type and the element shape.
    """
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    for key, v in metadata.items():
        if key == "general.architecture" or key.startswith("GGUF."):
            continue
        if key == "general.alignment":
            w.add_custom_alignment(int(v))
            continue
        val, vt, st = _value_type(v)
        w.add_key_value(key, val, gguf.GGUFValueType(vt), None if st is None else gguf.GGUFValueType(st))
    types = GGML_TYPES
    for name, (raw, ggml_type, shape) in tensors.items():
        assert int(ggml_type) in types, f"{name}: unknown ggml type {ggml_type}"
        tname, block, type_size = types[int(ggml_type)]
        shape = tuple(int(d) for d in shape)
        assert shape and shape[-1] % block == 0, f"{name}: row length of {shape} is not a multiple of {block}"
        row_bytes = shape[-1] // block * type_size
        raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
        assert raw.size == int(np.prod(shape, dtype=np.int64)) // block * type_size, (
            f"{name}: {raw.size} bytes do not fit {tname} shape {shape}")
        w.add_tensor(name, raw.reshape(*shape[:-1], row_bytes), raw_dtype=gguf.GGMLQuantizationType(int(ggml_type)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
