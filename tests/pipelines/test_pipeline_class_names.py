"""Class names as labels: every source maps names (str or bytes) to contiguous ids, keeps the names."""

import numpy as np
import pytest

from pipelines import sources

NAMES = np.repeat(["dog", "ant", "emu", "cat", "bee"], 4)


def _features(n):
    return np.arange(n * 3, dtype=np.float32).reshape(n, 3)


@pytest.mark.parametrize("kind", ["str", "bytes", "object"])
def test_arrays_source_accepts_class_names(kind):
    labels = {"str": NAMES, "bytes": NAMES.astype("S"), "object": NAMES.astype(object)}[kind]
    src = sources.get_source("arrays", features=_features(20), labels=labels)
    train, test = src.split("train"), src.split("test")
    # Sorted names, first ceil(5 / 2) train; labels contiguous int32 from 0 in each split.
    assert list(train.class_ids) == ["ant", "bee", "cat"] and list(test.class_ids) == ["dog", "emu"]
    assert train.class_names == {0: "ant", 1: "bee", 2: "cat"}
    assert test.class_names == {0: "dog", 1: "emu"}
    assert train.labels.dtype == np.int32 and sorted(set(train.labels)) == [0, 1, 2]
    # Every example keeps its class.
    in_train = np.isin(NAMES, ["ant", "bee", "cat"])
    np.testing.assert_array_equal(train.class_ids[train.labels], NAMES[in_train])
    np.testing.assert_array_equal(train.images, _features(20)[in_train])


def test_train_and_test_classes_by_name(tmp_path):
    src = sources.get_source("arrays", features=_features(20), labels=NAMES,
                             train_classes=["emu", "ant"])
    assert list(src.split("train").class_ids) == ["ant", "emu"]
    assert list(src.split("test").class_ids) == ["bee", "cat", "dog"]
    (tmp_path / "test.txt").write_text("cat\ndog\n")
    src = sources.get_source("arrays", features=_features(20), labels=NAMES.astype("S"),
                             test_classes=str(tmp_path / "test.txt"))
    assert list(src.split("test").class_ids) == ["cat", "dog"]
    with pytest.raises(ValueError, match="names class 'owl'"):
        sources.get_source("arrays", features=_features(20), labels=NAMES, train_classes=["owl"])


def test_npz_source_accepts_class_names_with_and_without_its_split(tmp_path):
    path = tmp_path / "set.npz"
    images = np.arange(20 * 16, dtype=np.uint8).reshape(20, 4, 4)
    np.savez(path, images=images, labels=NAMES, test=np.isin(NAMES, ["bee", "dog"]))
    src = sources.get_source("npz", path=str(path), test="test")
    assert list(src.split("train").class_ids) == ["ant", "cat", "emu"]
    assert src.split("test").class_names == {0: "bee", 1: "dog"}
    src = sources.get_source("npz", path=str(path), train_classes=["dog"])
    assert src.split("train").class_names == {0: "dog"}
    np.savez(path, images=images, labels=NAMES.astype("S"))
    assert list(sources.get_source("npz", path=str(path)).split("test").class_ids) == ["dog", "emu"]


@pytest.mark.parametrize("labels, match", [
    (np.array([1, "a"] * 10, dtype=object), "mix class names and numbers"),
    (np.array(["a", None] * 10, dtype=object), "mix class names and numbers"),
    (np.array(["a", ""] * 10), "empty class name"),
    (np.array([True, False] * 10), "got booleans"),
    (np.array([0.5, 1.0] * 10), "integer class ids or class names"),
    (np.array([b"\xff", b"a"] * 10), "not UTF-8"),
], ids=["int_and_str", "none", "empty", "bool", "float", "bad_bytes"])
def test_bad_label_arrays_are_clear_errors(labels, match):
    with pytest.raises(ValueError, match=match):
        sources.get_source("arrays", features=_features(20), labels=labels)


@pytest.mark.parametrize("mode", ["classes", "examples"])
def test_a_held_out_validation_split_keeps_the_names(mode):
    train = sources.get_source("arrays", features=_features(20), labels=NAMES,
                               train_classes=4).split("train")
    kept, validation = sources.hold_out(train, 0.5, mode=mode)
    for split in (kept, validation):
        assert sorted(split.class_names.values()) == sorted(split.class_ids.tolist())
        rows = (split.images[:, 0] / 3).astype(int)  # _features: row i starts with 3 i
        np.testing.assert_array_equal(split.class_ids[split.labels], NAMES[rows])
    names = set(kept.class_ids) | set(validation.class_ids)
    assert names == {"ant", "bee", "cat", "dog"}
