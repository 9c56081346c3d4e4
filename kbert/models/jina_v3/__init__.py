"""Jina-embeddings-v3 (`model_type` jina_embeddings_v3), and the rotary post-norm encoders built like it."""
