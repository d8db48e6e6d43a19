"""Which Keras route runs a loss, and whether it trains what the loss learns.

Keras trains the variables of the model it compiles (``model.trainable_variables``),
never those of a loss passed to ``compile(loss=...)``. A loss with learned state in
``parameter_layers`` (the proxies of Movshovitz-Attias et al. 2017 / Kim et al. 2020,
Wu et al. 2017's β) therefore needs a model that tracks those layers:
:class:`tfdml.models.EmbeddingModel` does, a plain ``keras.Model`` does not, and its
``fit`` would run with the state frozen at its initial values, silently.

* :func:`run_by_embedding_model`: the context in which ``EmbeddingModel.compute_loss``
  runs its loss (the model trains the loss's state and counts its input checks);
* :func:`calling_model`: otherwise, the Keras model whose ``compute_loss`` (the public
  Keras hook every train and test step calls) runs the loss, or None (a user's own
  ``tf.function`` or ``GradientTape`` loop, which chooses its variables itself);
* :func:`refuse_untracked_state` raises when that model does not train the loss's
  variables. All run in Python, so at trace time, in every ``jit_compile`` mode.
"""

import contextlib
import sys
import threading

import keras

_lock = threading.Lock()
#: How many ``EmbeddingModel.compute_loss`` calls are running (replicas of a
#: distribution strategy run them on threads of their own, so not thread-local).
_embedding_model_calls = 0


@contextlib.contextmanager
def run_by_embedding_model():
    """Within: a loss is run by :class:`tfdml.models.EmbeddingModel`, which trains its
    ``parameter_layers`` and counts its input checks after the step."""
    global _embedding_model_calls
    with _lock:
        _embedding_model_calls += 1
    try:
        yield
    finally:
        with _lock:
            _embedding_model_calls -= 1


def caller_counts_checks():
    """True inside :func:`run_by_embedding_model`: the model counts the loss's input checks
    in the step and raises after it, so the loss needs no assert of its own."""
    return _embedding_model_calls > 0


def calling_model():
    """The ``keras.Model`` whose ``compute_loss`` (or Keras' ``_compute_loss`` wrapper) is on
    the call stack (the innermost), or None. Only frames of functions without closure cells
    are read (Keras' own, a plain override): reading the locals of a frame with cells (an
    autograph-converted function) can overwrite its cells on CPython 3.11."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("compute_loss", "_compute_loss") and not (code.co_freevars or code.co_cellvars):
            owner = frame.f_locals.get("self")
            if isinstance(owner, keras.Model):
                return owner
        frame = frame.f_back
    return None


def untracked_variables(model, layers):
    """The trainable variables of ``layers`` that ``model`` does not train."""
    trained = {id(v) for v in model.trainable_variables}
    return [v for layer in layers for v in layer.trainable_variables if id(v) not in trained]


def refuse_untracked_state(owner, layers):
    """Raise ValueError when a model's ``compute_loss`` runs the loss ``owner`` (its class
    name) but does not train the trainable variables of its ``layers``."""
    if caller_counts_checks():
        return  # EmbeddingModel tracks the loss's parameter_layers
    model = calling_model()
    if model is None:
        return
    missing = untracked_variables(model, layers)
    if not missing:
        return
    names = ", ".join(sorted({v.path for v in missing}))
    raise ValueError(
        f"{owner} learns its own variables ({names}), which a plain keras.Model does not train "
        f"(Keras trains the model's variables, not the loss's): {type(model).__name__} "
        f"{model.name!r} would fit with them frozen. Wrap the encoder instead: "
        "model = tfdml.models.EmbeddingModel(encoder); model.compile(optimizer=..., loss=loss)."
    )

