"""Checkpoints by name: `hf://`, `modelscope://`, release archives by URL, and presets, cached.

`resolve_checkpoint` turns any of them into a local directory (a path passes
through unchanged); every place kbert takes a checkpoint path calls it, so
`kbert train --checkpoint hf://hfl/chinese-roberta-wwm-ext` needs no other
file. `sources` resolves and caches, `download` fetches one file (resumed,
verified, locked), `archives` unpacks safely, `presets` is the table of
known names.
"""

from kbert.hub.presets import PRESETS, Preset
from kbert.hub.sources import Checkpoint, cache_root, fetch_checkpoint, is_checkpoint_name, resolve_checkpoint

__all__ = ["PRESETS", "Preset", "Checkpoint", "cache_root", "fetch_checkpoint", "is_checkpoint_name",
           "resolve_checkpoint"]
