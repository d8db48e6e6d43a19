"""Which Keras route runs a loss, and whether it trains what the loss learns.

Keras trains the variables of the model it compiles (``model.trainable_variables``),
never those of a loss passed to ``compile(loss=...)``. A loss with learned state in
``parameter_layers`` (the proxies of Movshovitz-Attias et al. 2017 / Kim et al. 2020,
Wu et al. 2017's β) therefore needs a model that tracks those layers:
:class:`tfdml.models.EmbeddingModel` does, a plain ``keras.Model`` does not, and its
``fit`` would run with the state frozen at its initial values, silently.

:func:`calling_model` finds the model whose ``compute_loss`` (the public Keras hook
that every train and test step calls, and that ``EmbeddingModel`` overrides) is
running the loss; :func:`refuse_untracked_state` raises when that model does not train
the loss's variables. Both run in Python, so at trace time in every ``jit_compile``
mode, and not at all in a user's own ``tf.function`` or ``GradientTape`` loop (which
chooses its variables itself).
"""

import sys

import keras


def calling_model():
    """The ``keras.Model`` whose ``compute_loss`` is on the call stack (the innermost), or None.
    Also as autograph converts it (``tf__compute_loss``, in a caller's ``tf.function``) and
    as Keras wraps it (``_compute_loss``)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name.endswith("compute_loss"):
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

