"""The adaptive controller of smart mining: how hard the mined batches are, changed from what
training shows (Harwood et al., "Smart Mining for Deep Metric Learning", ICCV 2017).

The paper's abstract and introduction say that an adaptive controller "automatically adjusts
the smart mining hyper-parameters" to speed up training. Which hyper-parameter it controls,
from which signal, with which gains, is in the paper's method section, whose text was not
available to this library's authors; no equation number is cited here, and the rule below is
this library's, stated so it can be checked:

    after each epoch t with mean training loss L_t (the log key ``monitor``):
        p_{t+1} = clip(p_t + step, low, high)   if t > 0 and L_t <= L_{t-1}
        p_{t+1} = clip(p_t - step, low, high)   if t > 0 and L_t >  L_{t-1}
        p_1 = p_0                               (the first epoch only records L_0)

p is the probability that a negative of a batch is a mined one (the design's
``hard_fraction``): while the loss falls the batches get harder; when it rises (training
strained by too many hard negatives) they get easier. A non-finite loss leaves p and the
recorded loss unchanged.
"""

import math

import numpy as np
import tensorflow as tf

__all__ = ["HardnessController"]


class HardnessController(tf.Module):
    """Moves ``fraction`` (a float32 scalar ``tf.Variable``, e.g.
    ``SmartMiningDesign.hard_fraction``) by ``step`` after each observed loss (rule: the
    module docstring), within ``[low, high]``.

    Its state (the fraction and the last loss) is variables: a ``tf.train.Checkpoint``
    holding the controller saves and restores it, so a resumed run continues from the same
    fraction.
    """

    def __init__(self, fraction, step=0.05, low=0.0, high=1.0, name="hardness_controller"):
        super().__init__(name=name)
        step, low, high = float(step), float(low), float(high)
        if not (0.0 <= low <= high <= 1.0):
            raise ValueError(f"Need 0 <= low <= high <= 1 (a probability), got low={low}, high={high}.")
        if not step > 0.0:
            raise ValueError(f"step must be positive, got {step}.")
        if not isinstance(fraction, tf.Variable):
            raise ValueError("fraction must be a tf.Variable (the design's hard_fraction), got "
                             f"{type(fraction).__name__}.")
        self.fraction = fraction
        self.step, self.low, self.high = step, low, high
        with tf.device("/cpu:0"):
            self.last_loss = tf.Variable(float("nan"), dtype=tf.float32, trainable=False,
                                         name="last_loss")

    def observe(self, loss):
        """Record one epoch's loss and move the fraction; returns the new fraction (a float)."""
        loss = float(np.float32(loss))  # compared at the precision it is kept in
        if not math.isfinite(loss):
            return float(self.fraction.numpy())
        last = float(self.last_loss.numpy())
        p = float(self.fraction.numpy())
        if math.isfinite(last):
            p = p + self.step if loss <= last else p - self.step
            self.fraction.assign(min(max(p, self.low), self.high))
        self.last_loss.assign(loss)
        return float(self.fraction.numpy())

    def state(self):
        """``{"hard_fraction", "last_loss"}`` (JSON: ``last_loss`` None before the first
        loss), what a run's backup keeps; :meth:`restore` sets it back."""
        last = float(self.last_loss.numpy())
        return {"hard_fraction": float(self.fraction.numpy()),
                "last_loss": last if math.isfinite(last) else None}

    def restore(self, state):
        """Set the state :meth:`state` gave."""
        self.fraction.assign(float(state["hard_fraction"]))
        last = state.get("last_loss")
        self.last_loss.assign(float("nan") if last is None else float(last))

    def get_config(self):
        return {"step": self.step, "low": self.low, "high": self.high}
