"""The ``jit_compile`` modes of :class:`tfdml.models.EmbeddingModel` and
:class:`CompiledLoss`, the loss and its gradient as one XLA computation inside a train
step that is not compiled (``jit_compile="loss"``, :data:`LOSS_ONLY`).

:class:`CompiledLoss` hides its compiled call from the train step's tape with
TensorFlow's private ``record.stop_recording`` (guarded by
tests/tfdml/test_models.py::test_private_keras_api_we_rely_on).
"""

import tensorflow as tf
from tensorflow.python.eager import record as _tf_record


#: ``jit_compile`` value of :meth:`tfdml.models.EmbeddingModel.compile` that compiles the
#: loss and its sampler only (the encoder keeps TensorFlow's kernels).
LOSS_ONLY = "loss"
#: What ``EmbeddingModel.compile(jit_compile=...)`` and the config's
#: ``training.jit_compile`` accept: nothing compiled, the whole train step,
#: or the loss and its sampler only.
JIT_COMPILE_CHOICES = (False, True, LOSS_ONLY)


def resolve_auto_jit_compile(jit_compile):
    """What ``EmbeddingModel.compile(jit_compile="auto")`` (Keras' default) compiles.

    Keras' "auto" compiles the whole train step with XLA whenever the layers
    allow it, on CPU too. On a CPU, XLA's convolutions are slower than
    TensorFlow's (oneDNN) kernels while its fused [B, B] mining code is faster
    (``benchmarks/RESULTS.md``, "XLA modes"), so without a GPU "auto" compiles
    the loss and its sampler only (:data:`LOSS_ONLY`), in one replica; with
    several replicas on CPU nothing (XLA cannot place the mirrored variables of
    split CPU devices). With a GPU it stays Keras' "auto". Any other value is
    returned as it is."""
    if jit_compile != "auto" or tf.config.list_physical_devices("GPU"):
        return jit_compile
    if tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1:
        return False
    return LOSS_ONLY


class CompiledLoss:
    """A loss and its gradient as one XLA computation, inside a train step that is
    not compiled (``EmbeddingModel.compile(jit_compile="loss")``).

    Compiling the loss alone as a ``tf.function(jit_compile=True)`` and letting
    the train step's tape differentiate through it does not work: TensorFlow
    then splits the function into a forward and a backward function, and the
    forward one hands the intermediates of a ``tf.cond`` or ``tf.while_loop``
    (the distance refinement, the semi-hard sort path) to the backward one as
    optionals and tensor lists, which XLA cannot compile. So the compiled
    function computes the value *and* its gradients with respect to the
    embeddings and the loss's trainable variables (``parameter_layers``), and
    the train step sees the surrogate

        value + Σ_t ⟨stop_gradient(∂value/∂t), t − stop_gradient(t)⟩

    which equals ``value`` and whose gradient with respect to every t is the
    compiled gradient. The loss must keep its trainable state in
    ``parameter_layers`` (as every tfdml loss does); a loss with no trainable
    state needs nothing.

    Compiling only what gains: a loss may say, per batch, that its XLA form is
    slower than its graph form (``loss.xla_is_slower(y)``, a scalar bool tensor;
    a tfdml loss asks its sampler, :meth:`tfdml.samplers.base.Sampler.xla_is_slower`,
    which a custom sampler may answer: say, one that sorts with XLA's slow CPU sort
    above some class size; the built-in samplers never do). A ``tf.cond`` then runs that
    batch's value and gradients as the same function without XLA; both forms give
    the same loss. A loss without the method, or answering None, always runs compiled.
    """

    def __init__(self, loss, variables):
        self.loss = loss
        self.variables = variables
        # autograph=False: the loss is plain TensorFlow (as keras.losses.Loss.__call__,
        # which autograph leaves unconverted); converting it would only cost tracing time.
        self._value_and_gradients = tf.function(self._value_and_gradients_fn, jit_compile=True,
                                                reduce_retracing=True, autograph=False)
        self._value = tf.function(self._value_fn, jit_compile=True, reduce_retracing=True, autograph=False)
        # The same functions without XLA, for the batches where the loss reports XLA slower.
        self._graph_value_and_gradients = tf.function(self._value_and_gradients_fn,
                                                      reduce_retracing=True, autograph=False)
        self._graph_value = tf.function(self._value_fn, reduce_retracing=True, autograph=False)

    def _value_fn(self, y, y_pred):
        return self.loss(y, y_pred)

    def _xla_is_slower(self, y):
        """The loss's scalar bool answer for this batch, or None (always compile)."""
        ask = getattr(self.loss, "xla_is_slower", None)
        return None if ask is None else ask(y)

    def _runner(self, compiled_fn, graph_fn, y, y_pred):
        """A callable running ``compiled_fn(y, y_pred)``, or ``graph_fn`` where the loss
        reports XLA slower. Both are traced here, before the caller stops recording:
        traced while recording is stopped, their own tapes would record nothing."""
        compiled = compiled_fn.get_concrete_function(y, y_pred)
        slower = self._xla_is_slower(y)
        if slower is None:
            return lambda: compiled(y, y_pred)
        graph = graph_fn.get_concrete_function(y, y_pred)
        return lambda: tf.cond(slower, lambda: graph(y, y_pred), lambda: compiled(y, y_pred))

    def _value_and_gradients_fn(self, y, y_pred):
        variables = self.variables()
        with tf.GradientTape() as tape:
            tape.watch(y_pred)
            value = self.loss(y, y_pred)
        sources = [y_pred] + variables
        grads = tape.gradient(value, sources)
        return value, [tf.zeros_like(s) if g is None else tf.convert_to_tensor(g)  # β_class:
                       for s, g in zip(sources, grads)]                          # IndexedSlices

    def __call__(self, y, y_pred, training=True):
        if not training:
            return self._runner(self._value, self._graph_value, y, y_pred)()
        variables = self.variables()
        # Hidden from the train step's tape: a recorded call would be split into a
        # forward and a backward function, which is what XLA cannot compile (see
        # above). TensorFlow's own GradientTape.stop_recording does this for one
        # tape; here the tape is Keras', so the module function behind it is used
        # (private API; guarded by tests/tfdml/test_models.py::test_private_keras_api_we_rely_on).
        run = self._runner(self._value_and_gradients, self._graph_value_and_gradients, y, y_pred)
        with _tf_record.stop_recording():
            value, grads = run()
        surrogate = value
        for tensor, grad in zip([y_pred] + variables, grads):
            tensor = tf.convert_to_tensor(tensor)
            link = tf.reduce_sum(tf.stop_gradient(grad) * (tensor - tf.stop_gradient(tensor)))
            surrogate = surrogate + tf.cast(link, value.dtype)
        return surrogate
