"""The Keras dtype policies an encoder is built under (the config's ``model.dtype_policy``),
and ``"auto"``, the one the kernels table (:mod:`tfdml.kernels`) gives this device."""

import contextlib

import keras

from tfdml.kernels import chosen

#: The Keras dtype policies :func:`dtype_policy_scope` builds an encoder under (the
#: config's ``model.dtype_policy``): ``"float32"``, or ``"mixed_bfloat16"``: bfloat16
#: compute with float32 variables (needs no loss scaling, unlike ``"mixed_float16"``).
DTYPE_POLICIES = ("float32", "mixed_bfloat16")
#: The dtype policy that :func:`resolve_dtype_policy` picks for this machine.
AUTO_DTYPE_POLICY = "auto"
#: What :func:`dtype_policy_scope` and the config's ``model.dtype_policy`` accept.
DTYPE_POLICY_CHOICES = (AUTO_DTYPE_POLICY,) + DTYPE_POLICIES


def resolve_dtype_policy(policy, jit_compile=False):
    """The dtype policy an encoder is built under: ``policy`` itself, or for ``"auto"`` the
    one the kernels table (:mod:`tfdml.kernels`, entry ``"dtype_policy"``) gives this device
    in the mode its encoder runs: ``"xla"`` when ``jit_compile`` compiles the whole train
    step (``True``), else ``"graph"`` (``False`` and ``"loss"``: TensorFlow's kernels run the
    encoder). Today that is ``"mixed_bfloat16"`` on a CPU with bfloat16 instructions outside
    XLA, else ``"float32"``. ValueError for a name not in :data:`DTYPE_POLICY_CHOICES`."""
    if policy not in DTYPE_POLICY_CHOICES:
        raise ValueError(f"dtype policy {policy!r} is not supported; use one of: {', '.join(DTYPE_POLICY_CHOICES)}.")
    if policy != AUTO_DTYPE_POLICY:
        return policy
    return chosen.dtype_policy(jit_compile)


@contextlib.contextmanager
def dtype_policy_scope(policy, jit_compile=False):
    """Keras' global dtype policy set to ``policy`` (one of :data:`DTYPE_POLICY_CHOICES`;
    ``"auto"`` as :func:`resolve_dtype_policy` resolves it for ``jit_compile``) inside the
    block, and the previous one restored after it, also when the block raises.

    The layers created inside keep the policy: build the backbone and
    :func:`build_encoder` inside, the loss and the model that wraps the encoder outside.
    Raises ValueError for another name."""
    policy = resolve_dtype_policy(policy, jit_compile)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
