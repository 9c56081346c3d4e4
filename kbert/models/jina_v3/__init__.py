"""Jina-embeddings-v3 (`model_type` jina_embeddings_v3): the rotary post-norm skeleton on Hugging Face's XLM-R."""
