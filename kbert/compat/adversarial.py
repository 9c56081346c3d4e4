"""FGM adversarial training and the gradient penalty of bert4keras's examples, as Keras 3 train steps.

`kbert migrate` replaces a script's Keras 2 `adversarial_training` function
(built on `K.gradients` and `model._make_train_function`) with this one.
"""

from kbert.training.adversarial import adversarial_training, gradient_penalty

__all__ = ["adversarial_training", "gradient_penalty"]
