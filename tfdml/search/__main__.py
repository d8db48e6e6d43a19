"""``python -m tfdml.search``: :func:`tfdml.search.cli.main`."""

from tfdml.search.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
