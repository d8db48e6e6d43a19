"""The torch-free reader of PyTorch legacy state_dict files.

Small files are written here by hand in the legacy layout (magic, protocol,
sys_info, object pickle with persistent storage ids, key list, raw storages),
with a stand-in ``torch`` module so that ``pickle`` can name the globals; the
expected arrays are known by construction.
"""

import collections
import io
import os
import pickle
import struct
import sys
import types

import numpy as np
import pytest

from tfdml.backbones import torch_legacy
from tfdml.backbones.torch_legacy import TorchFileError, load_state_dict


class _Storage:
    def __init__(self, key, kind, array):
        self.key, self.kind, self.array = key, kind, array


class _Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride)


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in ``torch`` so pickle can write ``torch._utils._rebuild_tensor_v2``."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):  # never called: only its name is pickled
        raise AssertionError

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    for name in ("FloatStorage", "LongStorage"):
        cls = type(name, (), {"__module__": "torch", "__qualname__": name})
        setattr(torch, name, cls)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch


def _write_legacy(path, state, storages, torch):
    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, _Storage):
                return ("storage", getattr(torch, obj.kind), obj.key, "cpu", obj.array.size, None)
            return None

        def reducer_override(self, obj):
            if isinstance(obj, _Tensor):
                storage, offset, size, stride = obj.args
                return (torch._utils._rebuild_tensor_v2,
                        (storage, offset, size, stride, False, collections.OrderedDict()))
            return NotImplemented

    buf = io.BytesIO()
    for record in (torch_legacy.MAGIC_NUMBER, torch_legacy.PROTOCOL_VERSION,
                   {"protocol_version": 1001, "little_endian": True,
                    "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(record, buf, protocol=2)
    Pickler(buf, protocol=2).dump(state)
    pickle.dump([s.key for s in storages], buf, protocol=2)
    for s in storages:
        buf.write(struct.pack("<q", s.array.size))
        buf.write(s.array.astype(s.array.dtype.newbyteorder("<")).tobytes())
    with open(path, "wb") as f:
        f.write(buf.getvalue())


@pytest.fixture
def small_file(tmp_path, fake_torch):
    """Two float tensors sharing one storage (one transposed, one at an offset) + a long."""
    flat = np.arange(10, dtype=np.float32)
    s_float = _Storage("100", "FloatStorage", flat)
    s_long = _Storage("200", "LongStorage", np.array([7], np.int64))
    state = collections.OrderedDict()
    # size (3, 2), stride (1, 3): the transpose of flat[:6].reshape(2, 3)
    state["w_t"] = _Tensor(s_float, 0, (3, 2), (1, 3))
    # offset 6, size (2, 2), row-major
    state["tail"] = _Tensor(s_float, 6, (2, 2), (2, 1))
    state["count"] = _Tensor(s_long, 0, (), ())
    path = tmp_path / "small.pth"
    _write_legacy(path, state, [s_float, s_long], fake_torch)
    return path


def test_reads_strides_offsets_and_dtypes(small_file):
    sd = load_state_dict(small_file)
    assert list(sd) == ["w_t", "tail", "count"]
    flat = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(sd["w_t"], flat[:6].reshape(2, 3).T)
    np.testing.assert_array_equal(sd["tail"], flat[6:].reshape(2, 2))
    assert sd["w_t"].dtype == np.float32 and sd["w_t"].flags.c_contiguous
    assert sd["count"].dtype == np.int64 and sd["count"].shape == () and sd["count"] == 7


def test_does_not_import_torch(small_file, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delitem(sys.modules, "torch._utils")
    load_state_dict(small_file)
    assert "torch" not in sys.modules


@pytest.mark.parametrize("keep", [10, 200, -30, -1])
def test_truncated_file_is_a_clear_error(small_file, tmp_path, keep):
    data = small_file.read_bytes()
    bad = tmp_path / "cut.pth"
    bad.write_bytes(data[:keep] if keep > 0 else data[:len(data) + keep])
    with pytest.raises(TorchFileError, match="truncated|corrupt|not a PyTorch"):
        load_state_dict(bad)


def test_garbage_and_zip_files_are_clear_errors(tmp_path):
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(os.urandom(256))
    with pytest.raises(TorchFileError, match="not a PyTorch legacy file"):
        load_state_dict(garbage)
    other = tmp_path / "other_pickle.pth"
    other.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(TorchFileError, match="magic number"):
        load_state_dict(other)
    zipped = tmp_path / "new_format.pth"
    zipped.write_bytes(b"PK\x03\x04" + b"\0" * 60)
    with pytest.raises(TorchFileError, match="zip-format.*_use_new_zipfile_serialization=False"):
        load_state_dict(zipped)
    assert issubclass(TorchFileError, ValueError)


def test_foreign_globals_are_refused_not_executed(tmp_path):
    """A pickle naming any other global (here os.system) is rejected before it runs."""

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo should-not-run",))

    buf = io.BytesIO()
    for record in (torch_legacy.MAGIC_NUMBER, torch_legacy.PROTOCOL_VERSION,
                   {"little_endian": True}):
        pickle.dump(record, buf, protocol=2)
    pickle.dump({"x": Evil()}, buf, protocol=2)
    path = tmp_path / "evil.pth"
    path.write_bytes(buf.getvalue())
    with pytest.raises(TorchFileError, match="unsupported object .*system"):
        load_state_dict(path)
