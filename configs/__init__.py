"""BERT configs shipped with kbert (installed as the package `kbert.configs`)."""
