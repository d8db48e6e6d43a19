"""Index files (tfdml.search.fileformat): ids, labels and metadata survive a round trip, the
manifest names format, version and checksum, damaged files are clear errors."""

import json
import os
import zipfile

import numpy as np
import pytest

from tfdml.search import Index, as_keys


def test_ids_survive_as_given_and_save_load_round_trip(search_data, tmp_path):
    gallery, queries = search_data.random(6, n=5, q=4, dim=3)
    int_ids = [2**62 + 1, -5, 0, 2**63 - 1, -(2**63)]
    str_ids = ["é-ü", "猫", "", "a b", "x" * 40]
    labels = np.array([3, 3, 1, 2**62 + 7, 1], np.int64)
    for ids in (int_ids, str_ids):
        index = Index("cosine").add(gallery, ids, labels=labels,
                                    metadata=[{"n": i} for i in range(5)])
        path = index.save(tmp_path / "index.npz")
        loaded = Index.load(path)
        assert len(loaded) == 5 and loaded.distance == "cosine"
        assert loaded.ids.tolist() == ids  # exact: 2**62 + 1 is not a float
        assert loaded.labels.tolist() == labels.tolist()
        assert loaded.metadata_for([ids[1]]) == [{"n": 1}]
        np.testing.assert_array_equal(loaded.embeddings, gallery)
        a, b = index.search(queries, 5), loaded.search(queries, 5)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        # Only the file itself in the directory: the temporary one was renamed.
        assert os.listdir(tmp_path) == ["index.npz"]
    assert as_keys(np.array([2**62 + 1], np.uint64)).tolist() == [2**62 + 1]
    assert as_keys([b"caf\xc3\xa9"]).tolist() == ["café"]


def test_an_empty_index_saves_and_loads(tmp_path):
    index = Index("cosine").add(np.eye(2), ["a", "b"]).remove(["a", "b"])
    loaded = Index.load(index.save(tmp_path / "empty.npz"))
    assert len(loaded) == 0 and loaded.distance == "cosine"
    assert len(loaded.add(np.ones((1, 5)), [7])) == 1  # any dimension again


def test_manifest_names_format_version_and_checksum(tmp_path):
    path = Index().add(np.eye(3), [1, 2, 3]).save(tmp_path / "i.npz")
    with np.load(path) as data:
        manifest = json.loads(str(data["manifest"]))
    assert manifest["format"] == "tfdml.search.Index" and manifest["version"] == 1
    assert manifest["count"] == 3 and manifest["dim"] == 3 and len(manifest["sha256"]) == 64


def test_truncated_or_corrupt_file_is_a_clear_error(tmp_path):
    path = Index().add(np.eye(4), [1, 2, 3, 4]).save(tmp_path / "i.npz")
    raw = open(path, "rb").read()
    open(tmp_path / "cut.npz", "wb").write(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="Cannot read the index file.*Index.save"):
        Index.load(tmp_path / "cut.npz")
    # Same size, one embedding changed: the checksum catches it.
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    emb = bytearray(members["embeddings.npy"])
    emb[-1] ^= 0x40
    members["embeddings.npy"] = bytes(emb)
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    with pytest.raises(ValueError, match="checksum.*Index.save"):
        Index.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "other.npz", embeddings=np.eye(2))
    with pytest.raises(ValueError, match="not a tfdml index"):
        Index.load(tmp_path / "other.npz")


def test_exact_index_files_load_as_exact(tmp_path):
    from tfdml import search

    path = Index("cosine").add(np.eye(3), ["a", "b", "c"]).save(tmp_path / "i.npz")
    index = Index.load(path)
    assert index.search_settings == {"backend": "tensorflow", "approximate": None}
    assert "search: tensorflow exact" in search.describe(path)


def _documented_checksum(arrays):
    """The manifest's sha256 as the format documents it, written out independently."""
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape};".encode() + a.tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("search", [None, {"backend": "tensorflow", "approximate": None}])
def test_a_file_written_to_the_documented_format_loads(tmp_path, search):
    """A version-1 file made by hand from the format's description (without Index.save),
    also one without the optional ``search`` settings, loads with its entries."""
    from tfdml import search as search_lib

    arrays = {"embeddings": np.array([[0.0, 1.0], [3.0, 4.0]], np.float32),
              "ids": np.array(["a", "b"]), "labels": np.array([7, 9], np.int64),
              "metadata": np.array(json.dumps([{"f": "a.png"}, None]))}
    manifest = {"format": "tfdml.search.Index", "version": 1, "distance": "euclidean",
                "count": 2, "dim": 2, "id_kind": "str", "label_kind": "int64",
                "sha256": _documented_checksum(arrays)}
    if search is not None:
        manifest["search"] = search
    path = str(tmp_path / "hand.npz")
    np.savez(path, manifest=np.array(json.dumps(manifest)), **arrays)
    index = Index.load(path)
    assert index.search_settings == {"backend": "tensorflow", "approximate": None}
    assert index.ids.tolist() == ["a", "b"] and index.labels.tolist() == [7, 9]
    assert index.metadata_for(["a", "b"]) == [{"f": "a.png"}, None]
    ids, distances = index.search(np.array([[3.0, 4.0]]), k=2)
    assert ids.tolist() == [["b", "a"]] and distances[0, 0] == 0.0
    assert "2 entries, dim 2, distance euclidean, str ids, labels: int64" in search_lib.describe(path)
