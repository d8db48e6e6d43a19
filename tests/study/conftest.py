"""Shared fixtures of the benchmark scripts' tests."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def kanji_dir(tmp_path_factory):
    """A stand-in for the kanji-fonts set: 24 train and 6 test 'characters' of
    6 renderings each (noisy copies of a random glyph), in kanji_fonts.py's .npz layout."""
    root = tmp_path_factory.mktemp("kanji")
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(0x4E00, 0x4E00 + 30), 6).astype(np.int32)
    centres = rng.integers(0, 256, size=(30, 32, 32))
    noise = rng.normal(0, 30, size=(len(codes), 32, 32))
    images = np.clip(centres[codes - 0x4E00] + noise, 0, 255).astype(np.uint8)
    np.savez(root / "kanji_fonts.npz", images=images, codepoints=codes, test=codes >= 0x4E00 + 24,
             faces=np.tile(np.arange(6, dtype=np.int16), 30), face_names=np.array([f"f{i}" for i in range(6)]))
    return str(root)
