"""Start-up of the command lines (train.py, evaluate.py, search.py, ``python -m
tfdml.search``): importing TensorFlow quietly. Dependency-free, so a command can
call it before anything imports TensorFlow."""

import os
import sys


def quiet_tensorflow_import():
    """Import TensorFlow without its C++ start-up lines in the terminal (the
    one implementation for every command line).

    ``TF_CPP_MIN_LOG_LEVEL`` is set to 2 unless the user set it (TensorFlow
    reads it once). absl writes INFO lines such as "oneDNN custom operations
    are on" to the process's stderr before its logging is initialised,
    whatever that level says: the file descriptor of stderr is pointed at
    /dev/null for the import only; Python exceptions raised by the import
    still reach the user (they are printed after stderr is restored).
    """
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
