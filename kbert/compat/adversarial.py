"""The adversarial training of bert4keras's examples (FGM, gradient penalty, VAT), as Keras 3 train steps.

`kbert migrate` replaces a script's Keras 2 `adversarial_training` and
`virtual_adversarial_training` functions (built on `K.gradients` and
`model._make_train_function`) with these, and its `loss_with_gradient_penalty`
(`K.gradients` inside a loss) with this module's plain loss followed by
`gradient_penalty(model, ...)` after `compile`.

Example:
>>> import numpy as np, keras
>>> tokens = keras.Input((3,), dtype="int32")
>>> pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(10, 4, name="Embedding-Token")(tokens))
>>> model = keras.Model(tokens, keras.layers.Dense(2, activation="softmax")(pooled))
>>> model.compile(optimizer="adam", loss=loss_with_gradient_penalty)
>>> gradient_penalty(model, "Embedding-Token", epsilon=1)
>>> history = model.fit(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[0], [1]]), verbose=0)
"""

import keras

from kbert.training.adversarial import adversarial_training, gradient_penalty, virtual_adversarial_training

__all__ = ["adversarial_training", "gradient_penalty", "loss_with_gradient_penalty", "virtual_adversarial_training"]


def loss_with_gradient_penalty(y_true, y_pred):
    """The loss of bert4keras's `loss_with_gradient_penalty` without its penalty: sparse cross-entropy on
    probabilities (labels of shape `[batch]` or `[batch, 1]`).

    The penalty needs the gradient of the loss, which a Keras 3 loss cannot
    take: `gradient_penalty(model, 'Embedding-Token', epsilon)` after
    `compile` adds it to the train step (and to the reported loss).
    """
    return keras.losses.sparse_categorical_crossentropy(y_true, y_pred)
