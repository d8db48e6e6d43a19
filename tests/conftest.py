"""Shared test set-up: quiet TensorFlow, deterministic seeds."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``slow`` unless TFDML_SLOW=1 (CI runs the short versions)."""
    if os.environ.get("TFDML_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set TFDML_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
