"""The rotary post-norm encoders' skeleton: Jina-v3, GTE and NomicBERT build on it."""
