"""tfdml.plots writes readable PNGs and rejects inconsistent input."""

import matplotlib
import numpy as np
import pytest
from matplotlib import image as mpimg

from tfdml import plots


def test_plots_write_pngs_without_touching_the_backend(tmp_path):
    backend = matplotlib.get_backend()
    rng = np.random.default_rng(0)
    q = rng.random((2, 6, 6, 1))
    r = rng.random((2, 3, 6, 6, 1))
    paths = [
        plots.retrieval_grid(q, r, [[True, False, True], [False, False, True]],
                             str(tmp_path / "grid.png"), [1, 2], [[1, 0, 1], [0, 0, 2]]),
        plots.retrieval_grid(rng.random((1, 5, 5, 3)), rng.random((1, 2, 5, 5, 3)),
                             [[True, False]], str(tmp_path / "rgb.png")),
        plots.distance_histograms(rng.random(50), rng.random(80) + 0.5,
                                  str(tmp_path / "sub" / "hist.png")),
        plots.pr_curve(np.linspace(0, 1, 11), np.linspace(1, 0.2, 11), str(tmp_path / "pr.png"),
                       label="mAP 0.5"),
        plots.roc_curve([0, 0.2, 1], [0, 0.7, 1], str(tmp_path / "roc.png"), auc=0.8, eer=0.25),
    ]
    for path in paths:
        img = mpimg.imread(path)
        assert img.ndim == 3 and min(img.shape[:2]) > 40
    assert matplotlib.get_backend() == backend


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="disagree"):
        plots.retrieval_grid(np.zeros((2, 4, 4)), np.zeros((2, 3, 4, 4)), np.zeros((2, 2), bool),
                             str(tmp_path / "g.png"))
    with pytest.raises(ValueError, match="at least one"):
        plots.distance_histograms([], [], str(tmp_path / "h.png"))
    assert plots.is_image_batch(np.zeros((2, 4, 4, 3))) and not plots.is_image_batch(
        np.zeros((2, 10)))
