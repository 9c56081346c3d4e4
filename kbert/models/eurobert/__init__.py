"""EuroBERT (`model_type` eurobert): a Llama-style bidirectional encoder."""
