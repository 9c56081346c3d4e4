"""ELECTRA's discriminator (Google's `electra_*` checkpoints: `electra/…`, `discriminator_predictions/…`)."""
