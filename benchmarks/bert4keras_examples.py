"""Runs bert4keras's own 32 example scripts on kbert and prints which run: the migration test bed.

Each example is read from `../shared/bert4keras_examples/` (never copied into
the project) and gets only the edits every user must make:
- its config/checkpoint/vocabulary paths → tiny checkpoints written here, with
  the real 21,128-token Chinese vocabulary (`../shared/vocab/chinese_vocab.txt`);
- its data paths → small files in the script's own format, made from
  `../shared/data` (sentiment reviews, MSRA NER);
- its sizes → small (`maxlen`, `batch_size`, `epochs`, `steps_per_epoch`,
  and `fit(epochs=..., steps_per_epoch=...)`).
Then the migration under test: `--mode migrate` (default) runs `kbert
migrate`'s rewrite; `--mode prefix` only changes `bert4keras.` to
`kbert.compat.`. Each script runs in its own directory and process, with a
time limit, and the table says whether it ran to completion, and if not, why.

Usage:
    python benchmarks/bert4keras_examples.py [--mode migrate|prefix] [--only NAME ...] [--timeout S]
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

from kbert.compat.migrate import SourceEdits, migrate_source

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
EXAMPLES = SHARED / "bert4keras_examples"
VOCAB = SHARED / "vocab" / "chinese_vocab.txt"

# The module-level sizes every example gets (a user shrinking a run for a smoke test).
SIZES = {"maxlen": 64, "batch_size": 4, "epochs": 1, "steps_per_epoch": 2, "max_p_len": 48, "max_q_len": 16,
         "max_a_len": 8, "max_qa_len": 24, "max_c_len": 48, "max_t_len": 16, "bert_layers": 2, "steps": 20,
         "converged_steps": 10,
         "train_frac": 0.25,  # VAT's labelled share: its 0.01 of 24 lines would label none
         "num_classes": 2}  # the IFLYTEK stand-in has the sentiment corpus's 2 labels, not 119
LINES = 24  # examples per data split


@dataclasses.dataclass
class Example:
    """What one example needs: its checkpoint kind, its data (original path string → maker), or why it
    cannot run here."""

    checkpoint: str = "bert"
    data: Dict[str, Callable] = dataclasses.field(default_factory=dict)
    needs: Optional[str] = None
    serves: Optional[str] = None  # a server example: the request (path and query) it must answer
    follows: Optional[str] = None  # an example whose folder it shares, run first: it imports that one's module


def _sentiment(split: str, limit: Optional[int] = LINES) -> List[tuple]:
    rows = []
    with open(SHARED / "data" / "sentiment" / f"sentiment.{split}.data", encoding="utf-8") as handle:
        for line in handle:
            text, label = line.rstrip("\n").rsplit("\t", 1)
            rows.append((text[:60], int(label)))
            if len(rows) == limit:
                return rows
    return rows


def _msra(split: str) -> List[List[tuple]]:
    sentences, current = [], []
    with open(SHARED / "data" / "msra_ner" / f"msra.{split}.bmes", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                if current:
                    sentences.append(current[:60])
                    current = []
                if len(sentences) == LINES:
                    break
                continue
            char, tag = line.split()
            current.append((char, tag))
    return sentences


def sentiment_tsv(split):
    return lambda path: path.write_text("".join(f"{t}\t{label}\n" for t, label in _sentiment(split)), "utf-8")


def sentence_pairs(split):
    rows = _sentiment(split)
    return lambda path: path.write_text("".join(f"{a}\t{b}\t{int(x == y)}\n" for (a, x), (b, y)
                                                in zip(rows, rows[1:] + rows[:1])), "utf-8")


def iflytek_json(split):
    return lambda path: path.write_text("".join(json.dumps({"label": str(label), "label_des": "", "sentence": t},
                                                           ensure_ascii=False) + "\n"
                                                for t, label in _sentiment(split)), "utf-8")


def titled_tsv(split):
    return lambda path: path.write_text("".join(f"{t[:12]}\t{t}\n" for t, _ in _sentiment(split)), "utf-8")


def text_files(encoding: str = "utf-8"):
    """`DIR/*/*.txt` files (THUCNews; the novels, in GBK): a title line, then the text."""
    def make(path: pathlib.Path) -> None:
        folder = path.parent.parent / "category"
        folder.mkdir(parents=True, exist_ok=True)
        for i, (text, _) in enumerate(_sentiment("train")):
            (folder / f"{i}.txt").write_text(f"{text[:12]}\n{text}\n", encoding, errors="ignore")
    return make


def people_daily(split):
    """MSRA's BMES tags as the People's Daily corpus's `char TAG` lines (B-/I-)."""
    def make(path):
        blocks = ["\n".join(f"{char} {'I' + tag[1:] if tag[0] in 'ME' else 'B' + tag[1:] if tag[0] == 'S' else tag}"
                            for char, tag in sentence) for sentence in _msra(split)]
        path.write_text("\n\n".join(blocks), "utf-8")  # as the corpus: no newline after the last block
    return make


def _entities(sentence) -> List[str]:
    """The entity strings of an MSRA sentence (BMES tags)."""
    entities, current = [], ""
    for char, tag in sentence:
        if tag[0] in "BS":
            current = char
        elif tag[0] in "ME":
            current += char
        if tag[0] in "SE":
            entities.append(current)
    return entities


def qa_json(path: pathlib.Path) -> None:
    """WebQA/SogouQA's layout: questions, each with passages and the answer found in them (an MSRA entity)."""
    records = []
    for sentence in _msra("train"):
        text, entities = "".join(char for char, _ in sentence), _entities(sentence)
        if entities:
            records.append({"question": f"{text[:8]}是什么", "passages": [
                {"passage": text, "answer": entities[0]}, {"passage": text[::-1], "answer": ""}]})
    path.write_text(json.dumps(records, ensure_ascii=False), "utf-8")


def triples_json(split):
    """DuIE's layout: a text and its (subject, predicate, object) triples, from the MSRA entities of a sentence.

    Texts are cut to 16 characters: an untrained GlobalPointer scores about half of all spans above 0,
    and GPLinker's decoding pairs every subject span with every object span.
    """
    def make(path):
        lines = []
        for sentence in (sentence[:16] for sentence in _msra(split)):
            text, entities = "".join(char for char, _ in sentence), _entities(sentence)
            spo = [{"subject": a, "predicate": "相关", "object": b, "subject_type": "实体", "object_type": "实体"}
                   for a, b in zip(entities, entities[1:])]
            lines.append(json.dumps({"text": text, "spo_list": spo}, ensure_ascii=False))
        path.write_text("\n".join(lines) + "\n", "utf-8")
    return make


def schemas(path: pathlib.Path) -> None:
    path.write_text(json.dumps({"predicate": "相关", "subject_type": "实体", "object_type": "实体"},
                               ensure_ascii=False) + "\n", "utf-8")


def segmented_lines(path: pathlib.Path) -> None:
    """The PKU corpus's layout: words separated by spaces (an MSRA entity is a word, other characters alone)."""
    lines = []
    for sentence in _msra("train"):
        words, current = [], ""
        for char, tag in sentence:
            current += char
            if tag[0] in "OSE":
                words.append(current)
                current = ""
        lines.append(" ".join(words + [current] if current else words))
    path.write_text("\n".join(lines) + "\n", "utf-8")


def arithmetic_json(seed: int):
    """Ape210K's layout (../shared has no maths problems, so these are generated): a question, its equation
    and answer."""
    def make(path):
        import random
        generator = random.Random(seed)
        lines = []
        for _ in range(LINES):
            a, b = generator.randint(2, 50), generator.randint(2, 50)
            lines.append(json.dumps({"original_text": f"小明有{a}个苹果，又买了{b}个，一共有多少个苹果？",
                                     "equation": f"x={a}+{b}", "ans": str(a + b)}, ensure_ascii=False))
        path.write_text("\n".join(lines) + "\n", "utf-8")
    return make


SENTIMENT = {f"datasets/sentiment/sentiment.{s}.data": sentiment_tsv(s) for s in ("train", "valid", "test")}
IFLYTEK = {"/root/CLUE-master/baselines/CLUEdataset/iflytek/train.json": iflytek_json("train"),
           "/root/CLUE-master/baselines/CLUEdataset/iflytek/dev.json": iflytek_json("valid")}
THUCNEWS = {"/root/thuctc/THUCNews/*/*.txt": text_files()}
DUIE = {"/root/kg/datasets/train_data.json": triples_json("train"), "/root/kg/datasets/dev_data.json":
        triples_json("dev"), "/root/kg/datasets/all_50_schemas": schemas}
CSL = {f"/root/csl/{name}.tsv": titled_tsv(split) for name, split in
       (("train", "train"), ("val", "valid"), ("test", "test"))}

CASES = {
    "basic_extract_features": Example(),
    "basic_gibbs_sampling_via_mlm": Example(),
    "basic_language_model_cpm_lm": Example(checkpoint="gpt2"),
    "basic_language_model_gpt2_ml": Example(checkpoint="gpt2_ml"),
    "basic_language_model_nezha_gen_gpt": Example(),
    "basic_make_uncased_model_cased": Example(),
    "basic_masked_language_model": Example(),
    "basic_simple_web_serving_simbert": Example(serves="/gen_synonyms?text=苹果多少钱一斤&n=8&k=3"),
    "task_conditional_language_model": Example(data=SENTIMENT),
    "task_iflytek_adversarial_training": Example(data=IFLYTEK),
    "task_iflytek_bert_of_theseus": Example(checkpoint="bert6", data=IFLYTEK),  # its successor has 3 layers
    "task_iflytek_gradient_penalty": Example(data=IFLYTEK),
    "task_iflytek_multigpu": Example(data=IFLYTEK),
    "task_image_caption": Example(needs="COCO images and captions (not in ../shared)"),
    "task_language_model": Example(data={"/root/金庸/*/*.txt": text_files("gbk")}),
    "task_language_model_chinese_chess": Example(needs="chess game records (not in ../shared)"),
    "task_question_answer_generation_by_seq2seq": Example(data={"/root/qa_datasets/WebQA.json": qa_json, "/root/qa_datasets/SogouQA.json": qa_json}),
    "task_reading_comprehension_by_mlm": Example(data={"/root/qa_datasets/WebQA.json": qa_json, "/root/qa_datasets/SogouQA.json": qa_json}),
    "task_reading_comprehension_by_seq2seq": Example(data={"/root/qa_datasets/WebQA.json": qa_json, "/root/qa_datasets/SogouQA.json": qa_json}),
    "task_relation_extraction": Example(data=DUIE),
    "task_relation_extraction_gplinker": Example(data=DUIE),
    "task_sentence_similarity_lcqmc": Example(data={f"datasets/lcqmc/lcqmc.{s}.data": sentence_pairs(s)
                                                    for s in ("train", "valid", "test")}),
    "task_sentiment_albert": Example(checkpoint="albert", data=SENTIMENT),
    "task_sentiment_integrated_gradients": Example(checkpoint="albert", data=SENTIMENT,
                                                   follows="task_sentiment_albert"),
    "task_sentiment_virtual_adversarial_training": Example(data=SENTIMENT),
    "task_seq2seq_ape210k_math_word_problem": Example(data={
        f"/root/ape210k/{split}.ape.json": arithmetic_json(seed) for seed, split in enumerate(("train", "valid",
                                                                                                 "test"))}),
    "task_seq2seq_autotitle": Example(data=THUCNEWS),
    "task_seq2seq_autotitle_csl": Example(data=CSL),
    "task_seq2seq_autotitle_csl_mt5": Example(checkpoint="mt5.1.1", data=CSL),
    "task_seq2seq_autotitle_multigpu": Example(data=THUCNEWS),
    "task_sequence_labeling_cws_crf": Example(data={"/root/icwb2-data/training/pku_training.utf8": segmented_lines}),
    "task_sequence_labeling_ner_crf": Example(data={
        f"/root/ner/china-people-daily-ner-corpus/example.{name}": people_daily(split)
        for name, split in (("train", "train"), ("dev", "dev"), ("test", "test"))}),
}


def train_sentencepiece(directory: pathlib.Path) -> pathlib.Path:
    """A small SentencePiece model on the sentiment reviews, with T5's ids (pad 0, </s> 1, unk 2) and
    CPM-LM's `<cls>` piece (its newline)."""
    import sentencepiece

    corpus = directory / "corpus.txt"
    corpus.write_text("".join(f"{text}\n" for text, _ in _sentiment("train", limit=None)), "utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(directory / "spm"), vocab_size=4000, character_coverage=0.9995,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, user_defined_symbols=["<cls>"], minloglevel=2)
    return directory / "spm.model"


def write_checkpoints(directory: pathlib.Path) -> Dict[str, pathlib.Path]:
    """Tiny checkpoints in each family's original layout: BERT and ALBERT (every head's variables), a
    6-layer BERT (BERT-of-Theseus compresses it to 3) and GPT2-ML on the real Chinese vocabulary; GPT-2
    (CPM-LM's layout) and mT5 on a SentencePiece model trained here."""
    import shutil

    import sentencepiece
    from kbert import build_transformer_model, save_google_checkpoint

    directory.mkdir(parents=True, exist_ok=True)
    spm_model = train_sentencepiece(directory)
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(spm_model)).get_piece_size()
    vocab_size = sum(1 for _ in open(VOCAB, encoding="utf-8"))
    base = {"vocab_size": vocab_size, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 64, "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu"}
    t5 = {"vocab_size": pieces, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "attention_head_size": 16, "intermediate_size": 64, "hidden_act": ["gelu", "linear"], "dropout_rate": 0.1}
    configs = {"bert": base, "bert6": {**base, "num_hidden_layers": 6}, "albert": {**base, "embedding_size": 16},
               "gpt2_ml": base,
               "gpt2": {**base, "vocab_size": pieces, "max_position_embeddings": 1024},  # CPM-LM's length
               "mt5.1.1": t5}
    made = {}
    for kind, config in configs.items():
        folder = directory / kind
        folder.mkdir(exist_ok=True)
        shutil.copyfile(spm_model, folder / "spm.model")
        (folder / "keep_tokens.json").write_text(json.dumps(list(range(pieces))), "utf-8")
        (folder / "bert_config.json").write_text(json.dumps(config, indent=1), "utf-8")
        heads = {"with_pool": True, "with_nsp": True, "with_mlm": True} if kind in ("bert", "albert") else {}
        family = "bert" if kind == "bert6" else kind
        save_google_checkpoint(build_transformer_model(config, model=family, **heads), folder / "bert_model.ckpt")
        made[kind] = folder
    return made


class _UserEdits(SourceEdits, ast.NodeVisitor):
    """The spans a user edits: paths, data files and sizes (module-level names and `fit(...)` keywords)."""

    def __init__(self, source: str, checkpoint: pathlib.Path, data_files: Dict[str, pathlib.Path]):
        super().__init__(source)
        self.paths = {"config_path": checkpoint / "bert_config.json", "checkpoint_path": checkpoint / "bert_model.ckpt",
                      "dict_path": VOCAB, "spm_path": checkpoint / "spm.model",
                      "keep_tokens_path": checkpoint / "keep_tokens.json"}
        self.data_files = data_files

    def visit_Module(self, node):
        for statement in node.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name):
                name = statement.targets[0].id
                if name in self.paths:
                    self.edits.append((*self.span(statement.value), repr(str(self.paths[name]))))
                elif name in SIZES and isinstance(statement.value, ast.Constant):
                    self.edits.append((*self.span(statement.value), repr(SIZES[name])))
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and node.value in self.data_files:
            self.edits.append((*self.span(node), repr(str(self.data_files[node.value]))))

    def visit_Call(self, node):
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("fit", "fit_generator"):
            for keyword in node.keywords:
                if keyword.arg in ("epochs", "steps_per_epoch") and isinstance(keyword.value, ast.Constant):
                    self.edits.append((*self.span(keyword.value), repr(SIZES[keyword.arg])))
        self.generic_visit(node)


def prepare(name: str, case: Example, workdir: pathlib.Path, checkpoints: Dict[str, pathlib.Path],
            mode: str) -> tuple:
    """The example with the user's edits and the migration, written into its own directory, and the
    places `kbert migrate` says need a manual change."""

    folder = workdir / (case.follows or name)  # the script runs in folder/script: '../random_order.json' is its own
    (folder / "script").mkdir(parents=True, exist_ok=True)
    data = {}
    for original, make in case.data.items():
        target = folder / "data" / original.lstrip("/").replace("*", "all")
        target.parent.mkdir(parents=True, exist_ok=True)
        make(target)
        data[original] = folder / "data" / original.lstrip("/") if "*" in original else target
    source = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
    edits = _UserEdits(source, checkpoints[case.checkpoint], data)
    edits.visit(ast.parse(source))
    source = edits.result()
    migration = migrate_source(source)
    source = migration.source if mode == "migrate" else source.replace("bert4keras.", "kbert.compat.")
    script = folder / "script" / f"{name}.py"
    script.write_text(source, encoding="utf-8")
    return script, migration.manual


def run(script: pathlib.Path, timeout: int, serves: Optional[str] = None) -> tuple:
    """(status, seconds, last error line) of running the script in its directory; a server is asked
    `serves` once it listens, then stopped with SIGTERM."""
    if serves:
        return serve(script, timeout, serves)
    start = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, script.name], cwd=script.parent, capture_output=True, text=True,
                                timeout=timeout,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        return "timed out", time.perf_counter() - start, f"still running after {timeout} s"
    seconds = time.perf_counter() - start
    if result.returncode == 0:
        return "runs", seconds, ""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return "fails", seconds, lines[-1][:160] if lines else f"exit status {result.returncode}"


def serve(script: pathlib.Path, timeout: int, request: str) -> tuple:
    """A server example: started, asked `request` (it must answer bert4keras's code 0), stopped by SIGTERM."""
    import signal
    import urllib.parse
    import urllib.request

    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, script.name], cwd=script.parent, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)})
    try:
        line = process.stdout.readline()  # WebServing prints its address once it listens
        if "http://" not in line:
            process.wait(timeout=timeout)
            lines = [line for line in process.stderr.read().strip().splitlines() if line.strip()]
            return "fails", time.perf_counter() - start, lines[-1][:160] if lines else "it never listened"
        url = line.split("http://", 1)[1].split()[0].replace("0.0.0.0", "127.0.0.1")
        path, _, query = request.partition("?")
        query = urllib.parse.urlencode(urllib.parse.parse_qsl(query))
        with urllib.request.urlopen(f"http://{url}{path}?{query}", timeout=timeout) as response:
            answer = json.loads(response.read())
        if answer.get("code") != 0:
            return "fails", time.perf_counter() - start, f"answered {answer}"[:160]
        return "runs", time.perf_counter() - start, f"served {path}: {json.dumps(answer['data'], ensure_ascii=False)}"[:160]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["migrate", "prefix"], default="migrate")
    parser.add_argument("--only", nargs="*", help="example names (default: all 32)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per example")
    parser.add_argument("--keep", help="work in this directory and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    if not EXAMPLES.is_dir():
        print(f"{EXAMPLES} is absent: the shared fixtures folder ../shared is not beside the checkout")
        return 1
    names = args.only or sorted(CASES)
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown examples {', '.join(unknown)}; the 32 are the .py files in {EXAMPLES}")
    with tempfile.TemporaryDirectory() as temporary:
        workdir = pathlib.Path(args.keep or temporary)
        checkpoints = write_checkpoints(workdir / "checkpoints")
        rows = []
        for name in names:
            case = CASES[name]
            if case.needs:
                rows.append((name, "not run", 0.0, f"needs {case.needs}"))
            else:
                if case.follows and case.follows not in names[:names.index(name)]:
                    run(prepare(case.follows, CASES[case.follows], workdir, checkpoints, args.mode)[0], args.timeout)
                script, manual = prepare(name, case, workdir, checkpoints, args.mode)
                status, seconds, note = run(script, args.timeout, case.serves)
                if status != "runs" and manual:
                    status, note = "manual", f"line {manual[0].line}: {manual[0].message.split(':')[0]} " \
                                             f"(kbert migrate reports {len(manual)} place(s))"
                rows.append((name, status, seconds, note))
            print(f"{rows[-1][0]:45s} {rows[-1][1]:10s} {rows[-1][2]:6.1f} s  {rows[-1][3]}", flush=True)
    ran = sum(row[1] == "runs" for row in rows)
    print(f"\n| example | {args.mode} | seconds | note |\n|---|---|---:|---|")
    for name, status, seconds, note in rows:
        print(f"| {name} | {status} | {seconds:.0f} | {note.replace('|', '/')} |")
    print(f"\n{ran} of {len(rows)} examples ran to completion ({args.mode}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
