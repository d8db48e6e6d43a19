"""Read a PyTorch *legacy* (pre-1.6, non-zip) ``state_dict`` file without PyTorch.

A legacy ``torch.save`` file is a concatenation of five records
(``torch/serialization.py``, ``_legacy_save``):

1. a pickle of the magic number ``0x1950a86a20f9469cfc6c``;
2. a pickle of the protocol version ``1001``;
3. a pickle of a ``sys_info`` dict (``little_endian``, ``type_sizes``);
4. the pickle of the saved object itself, in which every storage is replaced by
   a *persistent id* ``("storage", StorageType, key, location, numel,
   view_metadata)`` and every tensor is built by
   ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)``;
5. a pickle of the list of storage keys, followed, for each key in that order,
   by an ``int64`` element count and the storage's raw little-endian bytes.

This module reads that layout with a *restricted* unpickler: only
``collections.OrderedDict``, the tensor-rebuild functions and the
``torch.*Storage`` type names are resolved (to local stand-ins), so no code
from the file is ever executed and ``torch`` is never imported. The result is
an ``OrderedDict`` of name -> ``numpy.ndarray`` (copies, C-contiguous).

Anything else (a zip-format file from ``torch.save`` >= 1.6, a pickled
``nn.Module``, a truncated or foreign file) raises :class:`TorchFileError`
(a ``ValueError``) that says what was found and what to do.
"""

from __future__ import annotations

import collections
import os
import pickle
import struct

import numpy as np

__all__ = ["TorchFileError", "load_state_dict", "MAGIC_NUMBER", "PROTOCOL_VERSION"]

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001

# torch storage class name -> numpy dtype (little-endian). bfloat16 has no
# NumPy dtype and is rejected with a clear message.
_STORAGE_DTYPES = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}


class TorchFileError(ValueError):
    """The file is not a readable legacy PyTorch state_dict."""


class _StorageType:
    """Stand-in for ``torch.FloatStorage`` etc.: only carries the dtype."""

    def __init__(self, name):
        self.name = name
        self.dtype = _STORAGE_DTYPES[name]


class _Storage:
    """A storage announced by a persistent id; its bytes are read later."""

    def __init__(self, key, dtype, numel):
        self.key = key
        self.dtype = dtype
        self.numel = numel
        self.array = None  # filled from record 5


class _StorageView:
    def __init__(self, base, offset, numel):
        self.base = base
        self.offset = offset
        self.numel = numel


class _TensorRef:
    """A tensor awaiting its storage's bytes."""

    def __init__(self, storage, offset, size, stride):
        self.storage = storage
        self.offset = int(offset)
        self.size = tuple(int(s) for s in size)
        self.stride = tuple(int(s) for s in stride)


def _rebuild_tensor(storage, storage_offset, size, stride, *unused):
    return _TensorRef(storage, storage_offset, size, stride)


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals a tensor state_dict needs; never torch."""

    def __init__(self, file, storages):
        super().__init__(file)
        self._storages = storages

    def find_class(self, module, name):
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        if module == "torch" and name == "BFloat16Storage":
            raise TorchFileError(
                "bfloat16 tensors have no NumPy dtype; re-save the state_dict as float32 "
                "(`{k: v.float() for k, v in sd.items()}`)."
            )
        raise TorchFileError(
            f"unsupported object {module}.{name} in the pickle: only a state_dict of "
            "tensors (OrderedDict name -> tensor) can be read; save `model.state_dict()`, "
            "not the model."
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage" and len(pid) == 6):
            raise TorchFileError(f"unexpected persistent id {pid!r}: not a legacy tensor storage")
        _, storage_type, key, _location, numel, view_metadata = pid
        if not isinstance(storage_type, _StorageType):
            raise TorchFileError(f"persistent id names an unknown storage type {storage_type!r}")
        if key not in self._storages:
            self._storages[key] = _Storage(key, storage_type.dtype, int(numel))
        base = self._storages[key]
        if view_metadata is not None:
            _view_key, offset, view_size = view_metadata
            return _StorageView(base, int(offset), int(view_size))
        return base


def _read_exact(f, n, what):
    data = f.read(n)
    if len(data) != n:
        raise TorchFileError(
            f"file is truncated: expected {n} bytes of {what}, found {len(data)}; "
            "reinstall the package or re-download the file."
        )
    return data


def _materialise(ref, name):
    storage = ref.storage
    base_offset = 0
    if isinstance(storage, _StorageView):
        base_offset = storage.offset
        storage = storage.base
    flat = storage.array
    offset = base_offset + ref.offset
    if any(s < 0 for s in ref.size) or any(s < 0 for s in ref.stride):
        raise TorchFileError(f"tensor {name!r} has a negative size or stride")
    if 0 in ref.size:
        return np.zeros(ref.size, storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(ref.size, ref.stride))
    if offset < 0 or last >= flat.size:
        raise TorchFileError(
            f"tensor {name!r} (size {ref.size}, stride {ref.stride}, offset {offset}) "
            f"reads past its storage of {flat.size} elements: the file is corrupt."
        )
    if not ref.size:  # 0-d tensor (e.g. num_batches_tracked)
        return np.array(flat[offset], dtype=storage.dtype.newbyteorder("="))
    item = flat.itemsize
    view = np.lib.stride_tricks.as_strided(
        flat[offset:],
        shape=ref.size,
        strides=tuple(s * item for s in ref.stride),
        writeable=False,
    )
    return np.ascontiguousarray(view).astype(storage.dtype.newbyteorder("="), copy=False)


def load_state_dict(path) -> "collections.OrderedDict[str, np.ndarray]":
    """Load a legacy-format PyTorch ``state_dict`` as NumPy arrays.

    Args:
      path: path of a ``.pth`` / ``.pt`` file written by ``torch.save`` with
        ``_use_new_zipfile_serialization=False`` (or by PyTorch < 1.6).

    Returns:
      ``OrderedDict`` of parameter / buffer name -> ``np.ndarray`` in the
      file's order and PyTorch's layout (e.g. conv kernels OIHW).

    Raises:
      FileNotFoundError: the path does not exist.
      TorchFileError (ValueError): the file is zip-format, truncated, not a
        PyTorch file, or holds something other than a state_dict of tensors.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(4)
        if head.startswith(b"PK\x03\x04"):
            raise TorchFileError(
                f"{path} is a zip-format PyTorch file (torch.save >= 1.6); this reader "
                "handles the legacy format only. Re-save it with "
                "torch.save(sd, path, _use_new_zipfile_serialization=False)."
            )
        f.seek(0)
        try:
            magic = pickle.load(f)
        except Exception as err:  # noqa: BLE001 - any unpickling failure means "not ours"
            raise TorchFileError(
                f"{path} is not a PyTorch legacy file (cannot read the magic number: {err})."
            ) from None
        if magic != MAGIC_NUMBER:
            raise TorchFileError(
                f"{path} is not a PyTorch legacy file: magic number {magic!r} != "
                f"{MAGIC_NUMBER:#x}."
            )
        storages: dict = {}
        try:
            version = pickle.load(f)
            if version != PROTOCOL_VERSION:
                raise TorchFileError(
                    f"{path}: unsupported legacy protocol version {version!r} "
                    f"(expected {PROTOCOL_VERSION})."
                )
            sys_info = pickle.load(f)
            if not (isinstance(sys_info, dict) and sys_info.get("little_endian", False)):
                raise TorchFileError(f"{path}: only little-endian files are supported.")
            obj = _RestrictedUnpickler(f, storages).load()
            keys = pickle.load(f)
        except TorchFileError:
            raise
        except (EOFError, pickle.UnpicklingError, struct.error, ValueError, TypeError,
                AttributeError, IndexError, KeyError) as err:
            raise TorchFileError(
                f"{path} is truncated or corrupt (failed while unpickling: "
                f"{type(err).__name__}: {err}); reinstall the package or re-download the file."
            ) from None
        if not isinstance(obj, dict):
            raise TorchFileError(
                f"{path} holds a {type(obj).__name__}, not a state_dict (a dict of tensors)."
            )
        if not isinstance(keys, list) or set(keys) != set(storages):
            raise TorchFileError(f"{path}: the storage key list does not match the tensors; corrupt file.")
        for key in keys:
            storage = storages[key]
            (numel,) = struct.unpack("<q", _read_exact(f, 8, f"storage {key} header"))
            if numel != storage.numel:
                raise TorchFileError(
                    f"{path}: storage {key} declares {numel} elements, the pickle "
                    f"{storage.numel}; corrupt file."
                )
            nbytes = numel * storage.dtype.itemsize
            raw = _read_exact(f, nbytes, f"storage {key} data")
            storage.array = np.frombuffer(raw, dtype=storage.dtype)
        trailing = f.read(1)
        if trailing:
            raise TorchFileError(f"{path}: unexpected bytes after the last storage; corrupt file.")
    out = collections.OrderedDict()
    for name, value in obj.items():
        if not isinstance(value, _TensorRef):
            raise TorchFileError(
                f"{path}: entry {name!r} is a {type(value).__name__}, not a tensor; "
                "only state_dicts of tensors are supported."
            )
        out[name] = _materialise(value, name)
    return out
