#!/usr/bin/env python
"""Build a search index from a trained model and an image folder, then query it.

The command line of :mod:`tfdml_app.search_cli` (``python search.py --help``),
installed as ``tfdml-search``.
"""

import sys

from tfdml_app.search_cli import main

if __name__ == "__main__":
    sys.exit(main())
