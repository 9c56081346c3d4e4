"""Llama (`model_type` llama) and the decoders built like it (Qwen2, Qwen3, Mistral): the backbones of the decoder
embedders and rerankers (Qwen3-Embedding, gte-Qwen2, e5-mistral, Llama-Embed-Nemotron)."""
