"""``python -m tfdml.search``: :func:`tfdml.search.cli.main`."""

from tfdml.search.cli import main

raise SystemExit(main())
