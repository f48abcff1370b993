"""Signs that a network has stopped looking at its input, read off one batch of features.

A torso of ReLU layers can collapse: a large or noisy update pushes every unit of a layer
below zero for every input, and from then on the features, and so the policy and the value,
are the same for every state. The losses do not show it (a constant value still fits the
mean return; the entropy bonus keeps a constant policy uniform), so a run goes on for hours
at a random policy's score. These metrics show it from the first learner step after.
"""

from __future__ import annotations

import tensorflow as tf

LIVE_FEATURES = "live_features"
FEATURE_STD = "feature_std"


def feature_health(features: tf.Tensor, mask: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """`live_features` and `feature_std` of features [..., F] over the rows `mask` keeps.

    live_features: the fraction of the F units whose value differs somewhere among the
      rows (max > min, exactly: a dead ReLU is exactly 0 everywhere, and units behind a
      dead layer are exactly their bias). 0 means the output no longer depends on the
      input. Needs two rows at least; a batch of one row reads 0.
    feature_std: the mean over units of each unit's standard deviation over the rows: a
      slow collapse (features shrinking towards constants) shows here before the units are
      exactly constant.

    `mask` ([...], 1 for rows to count) leaves out padding rows; None counts every row.
    """
    features = tf.cast(features, tf.float32)
    width = tf.shape(features)[-1]
    rows = tf.reshape(features, [-1, width])
    if mask is None:
        keep = tf.ones([tf.shape(rows)[0]], tf.bool)
    else:
        keep = tf.reshape(tf.cast(mask, tf.bool), [-1])
    rows = tf.boolean_mask(rows, keep)
    count = tf.cast(tf.shape(rows)[0], tf.float32)
    spread = tf.reduce_max(rows, axis=0) - tf.reduce_min(rows, axis=0)
    live = tf.reduce_mean(tf.cast(spread > 0.0, tf.float32))
    mean = tf.reduce_sum(rows, axis=0, keepdims=True) / tf.maximum(count, 1.0)
    variance = tf.reduce_sum(tf.square(rows - mean), axis=0) / tf.maximum(count, 1.0)
    return {
        LIVE_FEATURES: tf.where(count > 1.0, live, 0.0),
        FEATURE_STD: tf.reduce_mean(tf.sqrt(variance)),
    }


class CollapseWatch:
    """Notices a collapse in a learner's logged rows and says so once, in words.

    Fed every learner row (`observe`), it keeps the latest `live_features` (what the
    progress line shows) and returns a warning when that fraction has stayed at or below
    `threshold` for `patience` rows in a row: a few dead-looking batches are noise, a
    hundred are a network that stopped looking at its input. It warns again only after
    the features have recovered above the threshold. Rows without `live_features` (agents
    that do not log it) are ignored.
    """

    def __init__(self, threshold: float = 0.02, patience: int = 50):
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {threshold}.")
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}.")
        self.threshold = threshold
        self.patience = patience
        self.latest: float | None = None
        self._low_rows = 0
        self._warned = False

    def observe(self, row: dict) -> str | None:
        """Takes one learner row; returns a warning the first time a collapse is seen."""
        value = row.get(LIVE_FEATURES)
        if value is None:
            return None
        self.latest = float(value)
        if self.latest > self.threshold:
            self._low_rows, self._warned = 0, False
            return None
        self._low_rows += 1
        if self._warned or self._low_rows < self.patience:
            return None
        self._warned = True
        step = row.get("learner_steps")
        at = f" at learner step {int(step):,}" if step is not None else ""
        value_std = float(row.get("value_std", float("nan")))
        return (f"WARNING: the network's features have stopped depending on the observation"
                f"{at}: live_features <= {self.threshold:g} for {self._low_rows} learner steps "
                f"(now {self.latest:.3g}, value_std {value_std:.3g}). Its policy and value "
                "are now the same for every state, and learning rarely recovers from that. "
                "Lower the learning rate (for V-trace's adaptive rate: max_learning_rate; "
                "for its torso alone: torso_learning_rate_scale) and start again, or restart "
                "from an earlier checkpoint.")
