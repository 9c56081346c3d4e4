"""Mistral (`model_type` mistral): Llama's blocks with every layer's attention in a sliding window (e5-mistral,
SFR-Embedding)."""
