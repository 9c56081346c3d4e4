"""Known checkpoints by short name: `--checkpoint chinese_roberta_wwm_ext` for its full source.

Each preset names where the checkpoint is published (a hub repository or the
original release archive), the kbert family that reads it, and the bundled
config of the same shape (for `kbert presets`' parameter counts). `sha256`
pins an archive's contents; an archive without one is checked for being a
readable checkpoint, not against a digest.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional


@dataclasses.dataclass(frozen=True)
class Preset:
    """One known checkpoint.

    Args:
        name: the short name (`chinese_roberta_wwm_ext`).
        source: `hf://OWNER/NAME` or the archive's `https://` URL.
        family: the `model=` that reads it (`bert`, `roformer`, ...).
        config: the bundled config of the same shape, or None.
        about: one line: what it is and who published it.
        sha256: the archive's SHA-256, checked after download; None when not pinned.
    """

    name: str
    source: str
    family: str
    config: Optional[str]
    about: str
    sha256: Optional[str] = None


_ZHUIYI = "https://open.zhuiyi.ai/releases/nlp/models/zhuiyi"
_PRESETS = [
    Preset("bert_base_chinese", "hf://google-bert/bert-base-chinese", "bert", "bert_base_chinese",
           "Google's Chinese BERT-base (Hugging Face's upload)"),
    Preset("chinese_L-12_H-768_A-12",
           "https://storage.googleapis.com/bert_models/2018_11_03/chinese_L-12_H-768_A-12.zip", "bert",
           "bert_base_chinese", "Google's Chinese BERT-base, the original TF release archive"),
    Preset("chinese_roberta_wwm_ext", "hf://hfl/chinese-roberta-wwm-ext", "bert", "bert_base_chinese",
           "HFL's RoBERTa-wwm-ext (BERT's layout)"),
    Preset("chinese_roberta_wwm_ext_large", "hf://hfl/chinese-roberta-wwm-ext-large", "bert",
           "bert_large_chinese", "HFL's RoBERTa-wwm-ext-large (BERT's layout)"),
    Preset("chinese_macbert_base", "hf://hfl/chinese-macbert-base", "bert", "bert_base_chinese",
           "HFL's MacBERT-base (BERT's layout)"),
    Preset("chinese_electra_small_discriminator", "hf://hfl/chinese-electra-180g-small-discriminator",
           "electra", "electra_small_zh", "HFL's Chinese ELECTRA-small discriminator"),
    Preset("gpt2_chinese_cluecorpussmall", "hf://uer/gpt2-chinese-cluecorpussmall", "gpt2",
           "gpt2_chinese_base", "UER's Chinese GPT-2 on CLUECorpusSmall"),
    Preset("mt5_small", "hf://google/mt5-small", "mt5.1.1", "mt5_small", "Google's multilingual T5.1.1-small"),
    Preset("chinese_roformer_base", f"{_ZHUIYI}/chinese_roformer_L-12_H-768_A-12.zip", "roformer",
           "roformer_base_zh", "ZhuiyiTechnology's RoFormer-base, the original release archive"),
    Preset("chinese_simbert_base", f"{_ZHUIYI}/chinese_simbert_L-12_H-768_A-12.zip", "bert",
           "bert_base_chinese", "ZhuiyiTechnology's SimBERT-base (BERT with UniLM training)"),
    Preset("chinese_t5_pegasus_base", f"{_ZHUIYI}/chinese_t5_pegasus_base.zip", "t5.1.1",
           "t5_pegasus_base_zh", "ZhuiyiTechnology's T5 PEGASUS-base (T5.1.1's layout)"),
]
PRESETS: Dict[str, Preset] = {preset.name: preset for preset in _PRESETS}
