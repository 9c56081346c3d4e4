"""DeBERTa-v2 and v3 (`model="deberta_v2"`): BERT's post-norm blocks with disentangled attention."""
