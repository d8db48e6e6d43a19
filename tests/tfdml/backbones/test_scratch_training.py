"""EfficientNet-Lite0 trained from scratch must not collapse in inference mode.

With Keras' default glorot initialisation the pre-BN activations shrank layer
after layer, the moving variances (initialised at 1) overestimated them by
orders of magnitude, and every inference-mode output was the same vector
(feature std ~3e-6 after training, while the training-mode std was ~750).
"""

import keras
import numpy as np

from tfdml import losses, models
from tfdml.backbones import get_backbone


def test_scratch_network_is_not_constant_in_inference_mode_after_training():
    keras.utils.set_random_seed(0)
    backbone = get_backbone("efficientnet_lite0", weights=None, input_shape=(32, 32, 3), input_range=(0, 1))
    model = models.EmbeddingModel(models.build_encoder(backbone, 16))
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=losses.MarginLoss(num_classes=4, seed=0))
    x = np.random.default_rng(0).random((32, 32, 32, 3)).astype("float32")
    y = np.repeat(np.arange(4), 8)
    for _ in range(10):
        model.train_on_batch(x, y)
    features = backbone(x, training=False).numpy()
    assert np.all(np.isfinite(features))
    assert features.std(axis=0).sum() > 0.1
