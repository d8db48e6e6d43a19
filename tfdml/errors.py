"""How the command lines show a problem of the user's data, config or model.

``train.py`` and ``evaluate.py`` print such a problem as one line and exit
with status 2; a traceback is for bugs in tfdml, not for a NaN pixel, a
truncated model file or a full disk.
"""

import os
import sys

import tensorflow as tf

#: Exception types that stand for a problem of the user's input (data,
#: config, model file, disk), not for a bug: ValueError from our checks,
#: OSError from files and disks, TensorFlow's runtime errors from the data
#: pipeline and the model (their message names the op and the cause).
USER_ERROR_TYPES = (ValueError, OSError, tf.errors.OpError)


def report(err, prefix="Error: "):
    """Print ``err`` to stderr as one line after ``prefix`` and return the exit
    status 2; with ``TFDML_DEBUG=1`` re-raise it instead (the traceback)."""
    if os.environ.get("TFDML_DEBUG") == "1":
        raise err
    print(f"{prefix}{one_line(err)}", file=sys.stderr)
    print("(set TFDML_DEBUG=1 to see the traceback)", file=sys.stderr)
    return 2


def one_line(err):
    """The message of ``err`` on one line, without TensorFlow's graph trace
    (the "[[{{node ...}}]]" and "Function call stack" parts)."""
    text = getattr(err, "message", None) or str(err)
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Function call stack"):
            break
        if stripped and not stripped.startswith("[["):
            kept.append(stripped)
    return " ".join(kept) or type(err).__name__


class InvalidInputError(ValueError):
    """A batch's targets break a condition the loss needs (a label outside
    ``[0, num_classes)``, a negative importance weight, ...): the message names
    the column, the valid values, how many examples broke it and the fix.

    Raised by the loss itself when it runs eagerly, and by
    :class:`tfdml.models.EmbeddingModel` right after a compiled train or test
    step that counted such rows (XLA drops in-graph asserts, so the step counts
    them instead; it gave them no gradient)."""
