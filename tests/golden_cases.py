"""The bert4keras golden cases: which config and heads each file records."""

from conftest import CONFIGS, shared_path

# golden file -> (config path, builder flags, classifier labels)
CASES = {
    "chinese_base.json": ("bert_base_chinese.json", {}, 0),
    "chinese_base_cls2.json": ("bert_base_chinese.json", {}, 2),
    "chinese_base_pool_nsp_mlm.json": ("bert_base_chinese.json", {"with_nsp": True, "with_mlm": True}, 0),
    "chinese_large.json": ("bert_large_chinese.json", {}, 0),
    "uncased_base_pool.json": ("bert_base_uncased.json", {"with_pool": True}, 0),
    "tiny_ckpt.json": ("google_tiny", {}, 0),
    "tiny_ckpt_pool_nsp_mlm.json": ("google_tiny", {"with_nsp": True, "with_mlm": True}, 0),
    "tiny_ckpt_cls2.json": ("google_tiny", {}, 2),
}


def config_path(case: str):
    name = CASES[case][0]
    if name == "google_tiny":
        return shared_path("fixtures", "google_tiny", "bert_config.json")
    return CONFIGS / name
