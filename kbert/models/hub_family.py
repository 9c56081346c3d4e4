"""`HubFamily`: the base of the encoders released for transformers (or PyTorch) alone, never as Google checkpoints.

Such a family states only what differs from BERT's; this base says once what they all share: no original Google
TF checkpoint (`google_absent`, from `released_by` and `released_for`), none of bert4keras's own options
(conditional layer norms, residual attention scores), which their releases never had, an encoder alone with an
MLM head, its own `tokenizer.json`, and the config's `model_type` as transformers names it.

Pure Python (no TensorFlow).
"""

from __future__ import annotations

from kbert.models.bert.family import BertFamily


class HubFamily(BertFamily):
    """A family released for transformers (or PyTorch) alone.

    Subclasses set:
        released_by: what the release is called in messages ("ModernBERT").
        released_for: what it was released for ("transformers", "fairseq and transformers").

    Example:
    >>> class Example(HubFamily):
    ...     released_by, released_for = "Example-BERT", "transformers"
    ...     model_type = "example_bert"
    >>> Example.google_absent
    'Example-BERT was released for transformers, never as a Google TF checkpoint'
    >>> Example.hf_model_type
    'example_bert'
    """

    conditional_norms = False
    residual_scores = False
    heads = ("with_mlm",)
    applications = ("encoder",)
    own_tokenizer = True
    released_by = "this family"
    released_for = "transformers"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "hf_model_type" not in vars(cls):  # transformers' name for the model is kbert's
            cls.hf_model_type = cls.model_type
        cls.google_absent = f"{cls.released_by} was released for {cls.released_for}, never as a Google TF checkpoint"
