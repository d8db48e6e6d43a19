#!/usr/bin/env python
"""Evaluate a trained embedding model on a test split.

The command line of :mod:`tfdml_app.evaluate_cli` (``python evaluate.py --help``),
installed as ``tfdml-evaluate``.
"""

import sys

from tfdml_app.evaluate_cli import main

if __name__ == "__main__":
    sys.exit(main())
