"""study/kanji_fonts.py on fonts that are always there: matplotlib's DejaVu
faces rendering a few Latin letters (no CJK package needed)."""

import importlib.util
import json
import os
import shutil
import warnings

import matplotlib
import numpy as np
import pytest
from fontTools import ttLib

from pipelines import sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("kanji_fonts",
                                               os.path.join(ROOT, "study", "kanji_fonts.py"))
kf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kf)

DEJAVU = os.path.join(matplotlib.get_data_path(), "fonts", "ttf")
FACES = ["DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf",
         "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf"]
LETTERS = "AaBGgk"  # A, G train; a, B, g, k test (the fixed rule)
MIN = 3


def _rare_codepoint():
    """A character of DejaVu Sans (regular and bold) that Serif and Mono lack:
    2 distinct renderings, fewer than MIN."""
    cmaps = {f: set(ttLib.TTFont(os.path.join(DEJAVU, f), lazy=True).getBestCmap()) for f in FACES}
    sans = cmaps["DejaVuSans.ttf"] & cmaps["DejaVuSans-Bold.ttf"]
    others = set().union(*(cmaps[f] for f in FACES if "Sans." not in f and "Sans-" not in f))
    return min(cp for cp in sans - others if 0x100 <= cp and chr(cp).isalpha())


RARE = _rare_codepoint()
CHARS = LETTERS + chr(RARE)


@pytest.fixture(scope="module")
def fonts_dir(tmp_path_factory):
    """The DejaVu faces, a byte-for-byte copy of DejaVu Sans under another name
    (its renderings duplicate Sans's) and a symlink to Sans (one file, counted once)."""
    root = tmp_path_factory.mktemp("fonts")
    for name in FACES:
        shutil.copy(os.path.join(DEJAVU, name), root / name)
    shutil.copy(os.path.join(DEJAVU, "DejaVuSans.ttf"), root / "zz-sans-copy.ttf")
    os.symlink(root / "DejaVuSans.ttf", root / "zz-sans-link.ttf")
    return str(root)


def _build(fonts_dir, out, **kwargs):
    return kf.build(out=str(out), fonts_dirs=[fonts_dir], size=32, min_per_class=MIN, chars=list(CHARS),
                    verbose=False, **kwargs)


@pytest.fixture(scope="module")
def built(fonts_dir, tmp_path_factory):
    return _build(fonts_dir, tmp_path_factory.mktemp("set") / "kanji")


def _class_dirs(out):
    return {half: sorted(os.listdir(os.path.join(out, half))) for half in ("train", "test")}


def test_build_twice_gives_the_same_bytes_and_checksum(fonts_dir, built, tmp_path):
    out, manifest = built
    other, again = _build(fonts_dir, tmp_path / "again")
    assert again["checksum"] == manifest["checksum"] == kf.directory_checksum(out)
    for rel in (kf.NPZ_NAME, "train/U+00041/000.png"):
        with open(os.path.join(out, rel), "rb") as a, open(os.path.join(other, rel), "rb") as b:
            assert a.read() == b.read()
    assert again["counts"] == manifest["counts"]


def test_a_valid_cache_is_reused_and_a_damaged_one_rebuilt(fonts_dir, tmp_path):
    out, manifest = _build(fonts_dir, tmp_path / "cache")
    npz = os.path.join(out, kf.NPZ_NAME)
    stamp = os.stat(npz).st_mtime_ns
    assert _build(fonts_dir, out)[1] == manifest and os.stat(npz).st_mtime_ns == stamp
    png = os.path.join(out, "train", "U+00041", "000.png")
    with open(png, "ab") as fh:
        fh.write(b"x")
    assert kf.cached(out, manifest["settings"], kf.find_font_files([fonts_dir])) is None
    assert _build(fonts_dir, out)[1]["checksum"] == manifest["checksum"]
    assert kf.directory_checksum(out) == manifest["checksum"]


def test_identical_renderings_and_files_are_dropped(built):
    out, manifest = built
    faces = {os.path.basename(f["path"]): f for f in manifest["faces"]}
    assert "zz-sans-link.ttf" not in faces  # the same file as DejaVuSans.ttf
    assert faces["zz-sans-copy.ttf"]["mapped"] == len(CHARS)
    assert faces["zz-sans-copy.ttf"]["distinct"] == 0  # every rendering duplicates DejaVu Sans
    data = kf.load_npz(out)
    for cp in np.unique(data["codepoints"]):
        rows = data["images"][data["codepoints"] == cp].reshape(-1, 32 * 32)
        assert len(np.unique(rows, axis=0)) == len(rows)
        assert len(rows) <= len(FACES)


def test_classes_below_the_minimum_are_dropped(built):
    out, manifest = built
    classes = _class_dirs(out)
    assert kf.class_name(RARE) not in classes["train"] + classes["test"]
    assert sorted(classes["train"] + classes["test"]) == [kf.class_name(ord(c)) for c in sorted(LETTERS)]
    assert manifest["counts"]["dropped_classes"] == 1
    assert manifest["counts"]["per_class_min"] >= MIN


def test_the_split_is_open_set_and_fixed(built):
    out, _ = built
    classes = _class_dirs(out)
    assert not set(classes["train"]) & set(classes["test"])
    assert classes["train"] == ["U+00041", "U+00047"]  # A, G: pinned, the rule never moves
    assert classes["test"] == ["U+00042", "U+00061", "U+00067", "U+0006B"]
    assert [kf.is_test(cp) for cp in (0x4E00, 0x4E01, 0x4E03, 0x9F8D)] == [True, True, True, False]
    for half, names in classes.items():
        assert all(kf.is_test(int(n[2:], 16)) == (half == "test") for n in names)


def test_the_folder_source_reads_it_and_the_npz_matches(built):
    out, manifest = built
    source = sources.folder(root=out)
    data = kf.load_npz(out)
    for half, is_test in (("train", False), ("test", True)):
        split = source.split(half)
        rows = data["test"] == is_test
        assert split.image_shape == (32, 32, 1)
        assert split.num_examples == rows.sum() == manifest["counts"][f"{half}_images"]
        assert list(split.class_ids) == [kf.class_name(int(c)) for c in np.unique(data["codepoints"][rows])]
        pixels = np.asarray(split.load(np.arange(split.num_examples)))[..., 0]
        np.testing.assert_allclose(pixels, data["images"][rows] / 255.0, atol=1e-6)
        names = [os.path.relpath(f, out) for f in split.files]
        expected = [f"{half}/{kf.class_name(int(c))}/{int(f):03d}.png"
                    for c, f in zip(data["codepoints"][rows], data["faces"][rows])]
        assert names == expected
    assert data["images"].dtype == np.uint8 and data["images"].shape[1:] == (32, 32)
    assert len(data["face_names"]) == len(manifest["faces"])
    # A glyph is centred: its ink box sits in the middle, within the margin.
    ys, xs = np.nonzero(data["images"][0])
    assert ys.min() >= 2 and xs.min() >= 2 and ys.max() <= 29 and xs.max() <= 29
    assert abs((ys.min() + ys.max()) / 2 - 15.5) <= 1 and abs((xs.min() + xs.max()) / 2 - 15.5) <= 1


def test_manifest_fields(built):
    out, manifest = built
    with open(os.path.join(out, kf.MANIFEST_NAME), encoding="utf-8") as fh:
        assert json.load(fh) == manifest
    assert manifest["settings"]["size"] == 32 and manifest["settings"]["min_per_class"] == MIN
    assert "sha256" in manifest["split_rule"]
    counts = manifest["counts"]
    assert counts["classes"] == len(LETTERS) == counts["train_classes"] + counts["test_classes"]
    assert counts["images"] == counts["train_images"] + counts["test_images"]
    assert counts["per_class_min"] <= counts["per_class_median"] <= counts["per_class_max"]
    face = manifest["faces"][0]
    for key in ("id", "path", "face_index", "family", "style", "package", "package_version",
                "sha256", "mapped", "distinct"):
        assert key in face
    assert {"Pillow", "FreeType", "fontTools"} <= set(manifest["libraries"])
    assert len(manifest["checksum"]) == 64


def test_no_fonts_is_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(kf.KanjiFontsError, match="No font files"):
        kf.build(out=str(tmp_path / "out"), fonts_dirs=[str(empty)], chars="latin", verbose=False)
    assert kf.main(["--fonts-dir", str(empty), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "No font files" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")


def test_a_broken_font_is_skipped_with_a_warning(fonts_dir, tmp_path):
    fonts = tmp_path / "fonts"
    shutil.copytree(fonts_dir, fonts, symlinks=True)
    (fonts / "broken.ttf").write_bytes(b"not a font at all")
    with pytest.warns(UserWarning, match="broken.ttf"):
        _, manifest = _build(str(fonts), tmp_path / "out")
    assert manifest["counts"]["classes"] == len(LETTERS)


def test_too_few_distinct_renderings_everywhere_is_a_clear_error(fonts_dir, tmp_path):
    with pytest.raises(kf.KanjiFontsError, match="at least 50 distinct renderings"):
        kf.build(out=str(tmp_path / "out"), fonts_dirs=[fonts_dir], chars=["A", "B"], min_per_class=50,
                 verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kf.parse_chars("41-43,61") == [0x41, 0x42, 0x43, 0x61]
    with pytest.raises(kf.KanjiFontsError, match="--chars"):
        kf.parse_chars("kanji!")
    assert len(kf.parse_chars("jis")) == 6355
