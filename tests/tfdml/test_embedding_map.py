"""The embedding map: projector files TensorBoard reads back, a sprite cell per point, t-SNE
coordinates that keep separated classes apart, a readable plot with many classes."""

import os

import numpy as np
import pytest
from PIL import Image

from tfdml import embedding_map


def blobs(num_classes=3, per_class=20, dim=8, seed=0, spread=0.05):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_classes, dim)) * 5.0
    labels = np.repeat(np.arange(num_classes), per_class)
    return (centres[labels] + spread * rng.normal(size=(len(labels), dim))).astype(np.float32), labels


def read_tsv(path):
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\n").split("\t") for line in fh]


def test_projector_files_read_back(tmp_path):
    e, labels = blobs()
    images = np.linspace(0, 1, len(labels))[:, None, None] * np.ones((1, 6, 5))  # image i: constant i/(N−1)
    out = embedding_map.write_projector(e, labels, tmp_path / "projector", images=images,
                                        class_names={0: "zero", 1: "one\tbad", 2: "two"})
    tensors = np.asarray(read_tsv(os.path.join(out, "tensors.tsv")), np.float32)
    np.testing.assert_array_equal(tensors, e)  # 9 significant digits: float32 exactly
    meta = read_tsv(os.path.join(out, "metadata.tsv"))
    assert meta[0] == ["label", "class"] and len(meta) == len(labels) + 1
    assert meta[1] == ["0", "zero"] and meta[21] == ["1", "one bad"]
    config = open(os.path.join(out, "projector_config.pbtxt")).read()
    for part in ('tensor_path: "tensors.tsv"', 'metadata_path: "metadata.tsv"', 'image_path: "sprite.png"',
                 "single_image_dim: 6"):
        assert part in config
    picture = np.asarray(Image.open(os.path.join(out, "sprite.png")))
    cells = int(np.ceil(np.sqrt(len(labels))))  # 8 x 8 cells of 6 px
    assert picture.shape == (cells * 6, cells * 6, 3)
    for i in (0, 13, 59):
        row, col = divmod(i, cells)
        cell = picture[row * 6: row * 6 + 6, col * 6: col * 6 + 5]
        assert (cell == round(images[i, 0, 0] * 255)).all(), i


def test_sprite_shrinks_to_the_projectors_limit():
    images = np.zeros((10, 40, 40))
    images[:, :20] = 1.0  # top half white
    picture, thumb = embedding_map.sprite(images, max_size=64)  # 4 cells a side: 16 px each
    assert thumb <= 16 and picture.shape[0] <= 64
    assert picture[0, 0, 0] == 255 and picture[thumb - 1, 0, 0] == 0


def test_coordinates_keep_separated_classes_apart_and_repeat_for_a_seed():
    e, labels = blobs(num_classes=3, per_class=12)
    coords, method = embedding_map.coordinates(e, method="tsne", seed=1)
    assert method == "tsne" and coords.shape == (36, 2)
    again, _ = embedding_map.coordinates(e, method="tsne", seed=1)
    np.testing.assert_array_equal(coords, again)
    centres = np.stack([coords[labels == k].mean(0) for k in range(3)])
    spread = max(np.linalg.norm(coords[labels == k] - centres[k], axis=1).max() for k in range(3))
    gaps = [np.linalg.norm(centres[a] - centres[b]) for a in range(3) for b in range(a + 1, 3)]
    assert min(gaps) > 2 * spread  # every point closer to its own class's centre


def test_write_uses_the_same_points_for_both_and_replaces_an_earlier_map(tmp_path, monkeypatch):
    """(The layout itself is tested above; here a cheap stand-in keeps the test short.)"""
    monkeypatch.setattr(embedding_map, "coordinates", lambda e, **kw: (e[:, :2], kw["method"]))
    e, labels = blobs(num_classes=30, per_class=5)
    first = embedding_map.write(e, labels, tmp_path, max_points=100, seed=3, method="tsne")
    meta = read_tsv(os.path.join(first[0], "metadata.tsv"))[1:]
    keep = embedding_map.subsample(len(labels), 100, seed=3)
    assert [int(m[0]) for m in meta] == labels[keep].tolist()
    assert os.path.getsize(first[1]) > 10_000  # a PNG with 30 named classes
    embedding_map.write(e[:50], labels[:50], tmp_path, method="tsne")
    assert len(read_tsv(os.path.join(first[0], "metadata.tsv"))) == 51
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temporaries left


def test_many_classes_get_distinct_colours():
    colours = embedding_map.class_colours(60)
    assert len({tuple(np.round(c, 3)) for c in colours}) == 60
    # consecutive classes are far apart on the wheel
    assert min(np.abs(colours[1:, :3] - colours[:-1, :3]).sum(1)) > 0.2


@pytest.mark.parametrize("bad, message", [
    ((np.zeros((3, 2)), [0, 1]), "N labels"),
    ((np.zeros((1, 2)), [0]), "at least 2"),
    ((np.array([[0.0, np.nan], [1.0, 1.0]]), [0, 1]), "NaN"),
])
def test_bad_input_is_named(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        embedding_map.write(*bad, tmp_path)


def test_unknown_method_and_missing_umap_are_named():
    with pytest.raises(ValueError, match="choose one of"):
        embedding_map.coordinates(np.zeros((4, 2)), method="pca")
    try:
        import umap  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="umap-learn"):
            embedding_map.coordinates(np.zeros((4, 2)), method="umap")
