"""NomicBERT (`model_type` nomic_bert): the rotary post-norm encoder with SwiGLU and no biases."""
