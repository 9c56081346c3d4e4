"""Gemma 3's text model (`model_type` gemma3_text): EmbeddingGemma's backbone, bidirectional, and Gemma 3's causal
LM."""
