"""Weights files, both formats: Google's original TF checkpoints and Hugging Face safetensors.

- `names`: lookups in the families' weight tables (`kbert.models.tables`)
  through a model's family.
- `loader`: check every tensor, then assign them all (shared by both formats).
- `undrawn`: models built to be loaded, their weights never drawn at random.
- `google`: Google checkpoints: open, load, atomic save.
- `hf`: Hugging Face `model.safetensors`: open, load, save.
- `formats`: which format a path is, which family and heads a file's names
  belong to, `load_weights` for either format, `inspect_weights`.
- `sentence_transformers`: a sentence-transformers folder's modules (pooling,
  projections, normalisation, longest input), read without that library.
"""
