"""Tasks built on the models: what their data looks like, how they are scored.

- `labelling`: sequence labelling (NER): tagged files, tag schemes, spans, entity scores.
"""
