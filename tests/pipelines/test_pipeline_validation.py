"""The validation split held out of the training split (sources.hold_out)."""

import numpy as np
import pytest

from pipelines import sources


def _source():
    # 12 classes with user ids 100, 110, ..., 210 and 3..8 examples each; the
    # feature of an example is its own row number, so a split's rows say which
    # examples it holds.
    sizes = [3, 4, 5, 6, 7, 8] * 2
    labels = np.repeat(100 + 10 * np.arange(12), sizes)
    features = np.arange(labels.size, dtype=np.float32).reshape(-1, 1)
    return sources.arrays(features, labels), labels


def _rows(split):
    return set(split.load(np.arange(split.num_examples)).numpy()[:, 0].astype(int).tolist())


def _user_ids(split):
    return set(split.class_ids[split.labels].tolist())


def test_class_mode_holds_out_whole_training_classes_disjoint_from_test():
    source, labels = _source()
    full, test = source.split("train"), source.split("test")
    train, val = sources.hold_out(full, 0.34, mode="classes", seed=0)
    # round(0.34 × 6 training classes) = 2 classes held out.
    assert val.num_classes == 2 and train.num_classes == 4
    assert _user_ids(val).isdisjoint(_user_ids(train))
    assert _user_ids(val).isdisjoint(_user_ids(test)) and _rows(val).isdisjoint(_rows(test))
    assert _user_ids(val) | _user_ids(train) == _user_ids(full)
    # Every example of the training split is in exactly one part.
    assert _rows(train) | _rows(val) == _rows(full) and not _rows(train) & _rows(val)
    for split in (train, val):  # contiguous labels 0..L-1 per split, user ids kept
        assert sorted(set(split.labels.tolist())) == list(range(split.num_classes))
        for row, label in zip(split.load(np.arange(split.num_examples)).numpy()[:, 0], split.labels):
            assert labels[int(row)] == split.class_ids[label]
            assert split.class_names[label] == str(labels[int(row)])
        assert sum(split.class_sizes.values()) == split.num_examples
    assert val.name == "validation" and train.name == "train"


def test_examples_mode_holds_out_a_fraction_of_each_class():
    source, labels = _source()
    full, test = source.split("train"), source.split("test")
    train, val = sources.hold_out(full, 0.25, mode="examples", seed=0)
    assert list(val.class_ids) == list(full.class_ids) == list(train.class_ids)
    # round(0.25 n), at least 1, at most n - 1: sizes 3..8 -> 1, 1, 1, 2, 2, 2.
    assert [val.class_sizes[c] for c in range(6)] == [1, 1, 1, 2, 2, 2]
    assert [train.class_sizes[c] for c in range(6)] == [2, 3, 4, 4, 5, 6]
    assert not _rows(train) & _rows(val) and _rows(train) | _rows(val) == _rows(full)
    assert _rows(val).isdisjoint(_rows(test))


@pytest.mark.parametrize("mode", sources.VALIDATION_MODES)
def test_the_choice_depends_on_the_seed_only(mode):
    a = sources.hold_out(_source()[0].split("train"), 0.5, mode=mode, seed=7)[1]
    b = sources.hold_out(_source()[0].split("train"), 0.5, mode=mode, seed=7)[1]
    c = sources.hold_out(_source()[0].split("train"), 0.5, mode=mode, seed=8)[1]
    assert _rows(a) == _rows(b)
    assert _rows(a) != _rows(c)  # 20 choices of 3 classes / many of examples: seeds 7 and 8 differ


def test_folder_split_keeps_its_files(tmp_path):
    import tensorflow as tf

    for name in ("a", "b", "c", "d"):
        (tmp_path / name).mkdir()
        for k in range(2):
            tf.io.write_file(str(tmp_path / name / f"{k}.png"),
                             tf.io.encode_png(np.full((4, 4, 1), k * 50, np.uint8)))
    source = sources.folder(tmp_path, image_size=4, channels=1, train_classes=["a", "b", "c"])
    train, val = sources.hold_out(source.split("train"), 0.34, seed=0)
    assert val.num_classes == 1 and len(val.files) == 2
    assert {f.split("/")[-2] for f in val.files} == set(val.class_names.values())
    assert val.load([0, 1]).shape == (2, 4, 4, 1)


def test_impossible_hold_outs_are_clear_errors():
    one_class = sources.arrays(np.zeros((6, 1)), [0, 0, 0, 1, 1, 1]).split("train")
    with pytest.raises(ValueError, match="needs at least 2"):
        sources.hold_out(one_class, 0.5, mode="classes")
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        sources.hold_out(one_class, 1.5, mode="examples")
