"""BERT (and RoBERTa, the same layout): Google's `bert/…` checkpoints and Hugging Face's BertModel."""
