"""bert4keras 0.11.5's module layout on kbert and Keras 3: change `bert4keras.` to `kbert.compat.`.

- `backend`: `keras`, `K` (Keras 2's backend functions on `keras.ops`:
  `keras2`), `set_gelu`, `sequence_masking`, `search_layer`, `batch_gather`,
  the multilabel losses, `apply_rotary_position_embeddings`, `piecewise_linear`.
- `layers`: `Loss`, `LayerNormalization`, `ConditionalRandomField`,
  `GlobalPointer`, `EfficientGlobalPointer`, ... and Keras's own layers.
- `models`: `build_transformer_model`, `Transformer`.
- `tokenizers`: `Tokenizer`, `SpTokenizer`, `load_vocab`, `save_vocab`.
- `snippets`: `to_array`, `open`, `sequence_padding`, `DataGenerator`,
  `AutoRegressiveDecoder`, `ViterbiDecoder`, `text_segmentate`, ...
- `optimizers`: `Adam`, `AdaFactor`, every `extend_with_*`.
- `adversarial`: `adversarial_training`, `gradient_penalty` and
  `virtual_adversarial_training` as Keras 3 train steps (Keras 2's
  `K.gradients` code has no Keras 3 form).

`kbert migrate SCRIPT` makes this change and the Keras 2 → 3 edits a script
needs (`docs/migrating-from-bert4keras.md`).
"""
