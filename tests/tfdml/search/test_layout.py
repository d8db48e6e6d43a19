"""The modules of tfdml.search: the package exports what it lists (no module over
400 lines and no import circle: tests/test_imports.py, for every package)."""

import tfdml.search


def test_the_package_exports_what_it_lists():
    assert all(hasattr(tfdml.search, name) for name in tfdml.search.__all__)
    assert {"Index", "calibrate", "export_lookup", "as_keys", "main"} <= set(tfdml.search.__all__)
