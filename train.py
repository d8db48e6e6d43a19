#!/usr/bin/env python
"""Train and evaluate a deep metric learning model from one YAML config.

The command line of :mod:`tfdml_app.train_cli` (``python train.py --help``),
installed as ``tfdml-train``.
"""

import sys

from tfdml_app.train_cli import main

if __name__ == "__main__":
    sys.exit(main())
