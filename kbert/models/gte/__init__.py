"""GTE v1.5 / mGTE (`model_type` gte): the rotary post-norm encoder with a GLU feed-forward."""
