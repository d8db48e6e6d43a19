"""``python -m tfdml.search``: :func:`tfdml.search.cli.main`, with TensorFlow imported
quietly first (:func:`tfdml.startup.quiet_tensorflow_import`)."""

if __name__ == "__main__":
    from tfdml.startup import quiet_tensorflow_import

    quiet_tensorflow_import()
    from tfdml.search.cli import main

    raise SystemExit(main())
