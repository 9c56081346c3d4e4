"""Several task LoRA adapters from one set of weights (jina-embeddings-v3): the layers' stacked pairs
(`kbert.layers.task_lora`), the model built with them and loaded from Jina's files, each task's graph over the same
weights equal to that task merged in, and a server computing the tasks a request names, several in one batch."""

import concurrent.futures
import dataclasses
import json
import urllib.request

import keras
import numpy as np
import pytest

from kbert import CheckpointError, ConfigError, KbertError, build_transformer_model, load_hf_weights, save_hf_weights
from kbert.layers import Embedding, FeedForward, RotarySelfAttention, TaskLoRADense
from kbert.layers.task_lora import task_graph
from kbert.embeddings.embedder import Embedder
from test_rotary_encoders import CONFIGS, H, TASKS, as_sentence_transformer, jina_hub_folder

LORA = {"tasks": 3, "rank": 2, "scale": 0.5}


def random_pairs(layer, seed=0):
    """Random values in every task pair of `layer` (they start at zero: no update)."""
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        if "task_lora" in variable.path:
            variable.assign(rng.normal(0, 0.5, variable.shape).astype(np.float32))


def merged_kernels(layer, task):
    """`layer`'s weights with task `task`'s update merged into each weight that has a pair: kernel + scale·A·B."""
    values = {variable.path: keras.ops.convert_to_numpy(variable) for variable in layer.weights}
    merged = []
    for variable in layer.weights:
        if "task_lora" in variable.path:
            continue
        value = values[variable.path]
        owner = variable.path.rsplit("/", 1)[0]
        if f"{owner}/task_lora_a" in values and variable.path.endswith(("kernel", "embeddings")):
            value = value + LORA["scale"] * values[f"{owner}/task_lora_a"][task] @ values[f"{owner}/task_lora_b"][task]
        merged.append(value)
    return merged


@pytest.mark.parametrize("make, plain", [
    (lambda lora: RotarySelfAttention(num_heads=2, head_size=4, use_bias=True, task_lora=lora),
     lambda: RotarySelfAttention(num_heads=2, head_size=4, use_bias=True)),
    (lambda lora: FeedForward(12, activation="gelu", task_lora=lora), lambda: FeedForward(12, activation="gelu")),
    (lambda lora: TaskLoRADense(8, task_lora=lora, activation="tanh"), lambda: keras.layers.Dense(8, activation="tanh"))],
    ids=["attention", "feed_forward", "dense"])
def test_a_tasks_update_is_its_weights_merged(make, plain, tmp_path):
    """Called with `task=t`, a layer gives what the same layer without pairs gives with t's update merged into its
    weights (before the activation); without a task, its weights alone. Masks, `get_config` and a `.keras` file
    (safe_mode) of a graph that computes task 2 keep it."""
    x = keras.random.normal((2, 5, 8), seed=1)
    layer = make(LORA)
    base = keras.ops.convert_to_numpy(layer(x))
    random_pairs(layer)
    other = plain()
    other(x)
    for task in range(3):
        other.set_weights(merged_kernels(layer, task))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x, task=task)),
                                   keras.ops.convert_to_numpy(other(x)), atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), base, atol=1e-6)
    assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()

    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    model = task_graph(keras.Model(tokens, layer(hidden)), 2)
    ids = np.array([[5, 6, 7, 8, 0], [8, 9, 0, 0, 0]])
    output = model.predict(ids, verbose=0)
    assert output.shape[:2] == (2, 5)
    longer = model.predict(np.pad(ids, [(0, 0), (0, 3)]), verbose=0)
    np.testing.assert_allclose(longer[:, :5][ids > 0], output[ids > 0], atol=1e-5)
    model.save(tmp_path / "task.keras")
    restored = keras.models.load_model(tmp_path / "task.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), output, atol=1e-6)


def test_an_embeddings_task_update_is_its_table_merged(tmp_path):
    table = Embedding(20, 6, size_key="vocab_size", task_lora=LORA)
    ids = keras.ops.convert_to_tensor([[3, 0, 19]])
    base = keras.ops.convert_to_numpy(table(ids))
    random_pairs(table, seed=3)
    a, b = (keras.ops.convert_to_numpy(table.task_lora_a), keras.ops.convert_to_numpy(table.task_lora_b))
    merged = keras.ops.convert_to_numpy(table.embeddings) + 0.5 * a[1] @ b[1]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(table(ids, task=1)), merged[[[3, 0, 19]]], atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(table(ids)), base)
    assert Embedding.from_config(table.get_config()).get_config() == table.get_config()


def values(shape, start):
    """Distinct, reproducible values: 0.1 apart from `start`."""
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 0.1 + start).round(4)


#: Jina's own `LoRAParametrization.lora_forward` (jina-embeddings-v3's modeling_lora.py, run once by hand on these
#: values: 2 tasks, rank 2, lora_alpha 3): task 1's weight of a Linear 4 -> 3 (its lora_A `[tasks, rank, in]`,
#: lora_B `[tasks, out, rank]`), that Linear's output for one input, and task 1's table of an Embedding 5 x 3
#: (lora_A `[tasks, rows, rank]`, lora_B `[tasks, rank, width]`).
JINA_LINEAR_TASK_1 = [[1.315, 1.67, 2.025, 2.38], [2.135, 2.55, 2.965, 3.38], [2.955, 3.43, 3.905, 4.38]]
JINA_LINEAR_OUTPUT = [[6.127499, 8.657501, 11.1875]]
JINA_EMBEDDING_TASK_1 = [[0.53, 0.975, 1.42], [1.04, 1.545, 2.05], [1.55, 2.115, 2.68], [2.06, 2.685, 3.31],
                         [2.57, 3.255, 3.94]]


def test_kbert_reads_jinas_pairs_as_jinas_own_code_merges_them(tmp_path):
    """A/B order, alpha / rank and the embedding's transposed layout, against values Jina's adapter code gave:
    merged at load (`merged_reader`) and computed per task by the layers (`task_pairs`' Keras layout)."""
    from kbert.checkpoints.task_adapters import LORA_A, LORA_B, ORIGINAL, TaskAdapters, merged_reader

    tensors = {"dense" + ORIGINAL: values((3, 4), -0.5), "dense" + LORA_A: values((2, 2, 4), -0.3),
               "dense" + LORA_B: values((2, 3, 2), 0.2), "table" + ORIGINAL: values((5, 3), -0.7),
               "table" + LORA_A: values((2, 5, 2), 0.1), "table" + LORA_B: values((2, 2, 3), -0.4)}
    adapters = TaskAdapters(("t0", "t1"), 3 / 2, 2)
    read = merged_reader("jina", {name: value.shape for name, value in tensors.items()}, tensors.__getitem__,
                         adapters, "t1")
    np.testing.assert_allclose(read("dense" + ORIGINAL), JINA_LINEAR_TASK_1, atol=1e-5)
    np.testing.assert_allclose(read("table" + ORIGINAL), JINA_EMBEDDING_TASK_1, atol=1e-5)
    lora = {"tasks": 2, "rank": 2, "scale": 1.5}
    dense, table = TaskLoRADense(3, use_bias=False, task_lora=lora), Embedding(5, 3, task_lora=lora)
    dense.build((1, 4)), table.build((1, 1))
    dense.kernel.assign(tensors["dense" + ORIGINAL].T)  # Keras's [in, out]; the pairs as task_pairs lays them out
    dense.task_lora_a.assign(np.swapaxes(tensors["dense" + LORA_A], 1, 2))
    dense.task_lora_b.assign(np.swapaxes(tensors["dense" + LORA_B], 1, 2))
    table.embeddings.assign(tensors["table" + ORIGINAL])
    table.task_lora_a.assign(tensors["table" + LORA_A]), table.task_lora_b.assign(tensors["table" + LORA_B])
    x = np.array([[1.0, -2.0, 0.5, 3.0]], np.float32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(dense(x, task=1)), JINA_LINEAR_OUTPUT, atol=1e-5)
    rows = keras.ops.convert_to_numpy(table(keras.ops.convert_to_tensor([[0, 1, 2, 3, 4]]), task=1))[0]
    np.testing.assert_allclose(rows, JINA_EMBEDDING_TASK_1, atol=1e-5)


@pytest.fixture(scope="module")
def jina(tmp_path_factory):
    """Jina's files of a random jina-embeddings-v3 (five tasks' pairs), in a sentence-transformers folder whose
    prompts are named by task, as jina-embeddings-v3's are."""
    folder, _ = jina_hub_folder(tmp_path_factory.mktemp("jina"), alpha=3, rank=2)
    as_sentence_transformer(folder, "a b c d e query : passage")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {
        "retrieval.query": "query : ", "retrieval.passage": "passage : ", "separation": "", "classification": "",
        "text-matching": ""}, "default_prompt_name": None}))
    return folder


TEXTS = ["a b c", "c b", "d e a b c d", "e"]


def test_each_task_from_one_set_of_weights_is_that_task_merged(jina):
    """`Embedder.load(adapter=["all"])`: each task's vectors (`for_task`) equal those of the model with that task
    merged at load, prompt included; every task's model shares the one set of weights."""
    embedder = Embedder.load(jina, adapter=["all"])
    assert list(embedder.adapter_models) == TASKS and embedder.adapter == TASKS[0]
    for task in TASKS:
        one = Embedder.load(jina, adapter=task)
        np.testing.assert_allclose(embedder.for_adapter(task).encode(TEXTS), one.encode(TEXTS), atol=1e-5)
    query = embedder.for_adapter("retrieval.query")
    assert query.prompt_text() == "query : " and query.encode(TEXTS).shape == (4, H)
    assert np.abs(query.encode(TEXTS) - query.encode(TEXTS, prompt="")).max() > 1e-3  # the prompt counts
    # a task without a prompt of its name takes the folder's default (none), not the first task's prompt
    trimmed = dataclasses.replace(embedder, prompts={"retrieval.query": "query : "})
    assert trimmed.prompt_text() == "query : " and trimmed.for_adapter("separation").prompt_text() == ""
    weights = {id(variable) for task in TASKS for variable in embedder.for_adapter(task).model.weights}
    assert len(weights) == len(embedder.model.weights)


def test_what_several_tasks_cannot_do_is_refused_by_name(jina, tmp_path):
    embedder = Embedder.load(jina, adapter=["retrieval.query", "separation"])
    with pytest.raises(KbertError, match="task 'retrieval.passage': .* loaded with the task adapters "
                                         "retrieval.query, separation; name one of them"):
        embedder.for_adapter("retrieval.passage")
    with pytest.raises(CheckpointError, match="no task adapter 'retrieval'; this file's are retrieval.query"):
        Embedder.load(jina, adapter=["retrieval.query", "retrieval"])
    with pytest.raises(KbertError, match="expected task names, each once, or 'all' alone"):
        Embedder.load(jina, adapter=["separation", "separation"])
    plain = jina.parent / "base"  # the same model in transformers 5's layout: no adapters
    as_sentence_transformer(plain, "a b c")
    with pytest.raises(KbertError, match="base holds no task LoRA adapters .*names no lora_adaptations"):
        Embedder.load(plain, adapter=["all"])
    with pytest.raises(CheckpointError, match="holds every task's LoRA pair .* load it with adapter=TASK"):
        save_hf_weights(embedder.backbone, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="task_lora: the pooler has task adapters"):
        build_transformer_model(jina / "config.json", with_pool=True, task_lora=LORA)
    with pytest.raises(ConfigError, match="task_lora: model='gte' holds no task adapters"):
        build_transformer_model(CONFIGS["gte"], task_lora=LORA)


def test_a_file_without_a_pair_fails_before_anything_is_assigned(jina, tmp_path):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(jina / "model.safetensors")
    name = "roberta.encoder.layers.1.mlp.fc2.parametrizations.weight.0.lora_B"
    del tensors[name]
    broken = tmp_path / "broken"
    broken.mkdir()
    save_file(tensors, broken / "model.safetensors")
    (broken / "config.json").write_text((jina / "config.json").read_text())
    model = build_transformer_model(jina / "config.json", task_lora={"tasks": 5, "rank": 2, "scale": 1.5})
    before = [keras.ops.convert_to_numpy(variable) for variable in model.weights]
    with pytest.raises(CheckpointError, match=f"no tensor {name}: the pair of a parametrized weight is incomplete"):
        load_hf_weights(model, broken)
    assert all(np.array_equal(keras.ops.convert_to_numpy(variable), value)
               for variable, value in zip(model.weights, before))
    with pytest.raises(CheckpointError, match="loads them all, with the whole vocabulary: load it without adapter="):
        load_hf_weights(model, jina, adapter="separation")


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_a_server_computes_the_task_each_request_names(jina):
    """`kbert serve --adapter retrieval.query --adapter retrieval.passage`: a request's `task` (OpenAI's route, as
    Jina's API names it; TEI's `/embed`) gives that task's vectors, with its prompt; requests of both tasks
    arriving together share a batch and each gets its own; no task: the first; Cohere's `input_type`
    search_document: retrieval.passage; a task the server lacks: 422 naming `task`."""
    from test_serve import post, running_server

    expected = {task: Embedder.load(jina, adapter=task).encode(TEXTS) for task in TASKS[:2]}
    with running_server(jina, "--adapter", "retrieval.query", "--adapter", "retrieval.passage",
                        "--max-wait-ms", "1500") as (url, _):
        def embed(task):
            return post(url, {"input": TEXTS, "task": task}, path="/v1/embeddings")

        with concurrent.futures.ThreadPoolExecutor(2) as pool:  # within one batch's wait
            answers = list(pool.map(embed, TASKS[:2]))
        metrics = urllib.request.urlopen(url + "/metrics").read().decode()
        assert "kbert_batch_size_count 1.0" in metrics.splitlines()  # both tasks' rows in one batch
        for task, (status, answer) in zip(TASKS[:2], answers):
            assert status == 200
            np.testing.assert_allclose([row["embedding"] for row in answer["data"]], expected[task], atol=1e-5)
        status, answer = post(url, {"inputs": TEXTS, "task": "retrieval.passage", "normalize": False}, path="/embed")
        np.testing.assert_allclose(answer, expected["retrieval.passage"], atol=1e-5)
        status, answer = post(url, {"input": TEXTS}, path="/v1/embeddings")
        np.testing.assert_allclose([row["embedding"] for row in answer["data"]], expected[TASKS[0]], atol=1e-5)
        status, answer = post(url, {"texts": TEXTS, "input_type": "search_document"}, path="/v1/embed")
        np.testing.assert_allclose(answer["embeddings"], expected["retrieval.passage"], atol=1e-5)
        status, answer = post(url, {"input": TEXTS, "task": "separation"}, path="/v1/embeddings")
        assert status == 422 and answer["error"]["param"] == "task"
        assert "loaded with the task adapters retrieval.query, retrieval.passage" in answer["error"]["message"]
        assert json.loads(urllib.request.urlopen(url + "/info").read())["tasks"] == TASKS[:2]


def test_evaluate_takes_each_works_adapter(jina):
    """Loaded with several adapters, retrieval ranks queries embedded by `retrieval.query` against documents
    embedded by `retrieval.passage` (each with its prompt), as Jina's model card pairs them; a model without
    tasks, or with one, ranks as it is."""
    from kbert.embeddings.evaluation import rankings

    texts = {"document": ["a b c", "d e", "c c d", "e a", "b"], "query": ["a b", "d", "c e"]}
    ranked, _ = rankings(Embedder.load(jina, adapter=["all"]), texts)
    query, passage = (Embedder.load(jina, adapter=task) for task in ("retrieval.query", "retrieval.passage"))
    scores = query.encode(texts["query"], normalize=True) @ passage.encode(texts["document"], normalize=True).T
    assert [list(order) for order in ranked] == [list(np.argsort(-row, kind="stable")) for row in scores]
    alone, _ = rankings(query, texts)  # one adapter: both sides through it, as before
    scores = query.encode(texts["query"], normalize=True) @ query.encode(texts["document"], normalize=True).T
    assert [list(order) for order in alone] == [list(np.argsort(-row, kind="stable")) for row in scores]


def test_an_export_computes_the_adapter_it_names(jina, tmp_path):
    """`kbert export --adapter TASK`: the ONNX file gives that task's vectors, after its prompt (before, the base
    weights' were all an export could give). Its attention is one piece, not a loop of query blocks (which would
    keep onnxruntime and OpenVINO from fusing it)."""
    import onnx

    from kbert.serving.export import onnx_runner
    from test_distilbert_mpnet import cli

    assert cli("export", "--model", jina, "--adapter", "retrieval.passage", tmp_path / "passage.onnx") == 0
    embedder = Embedder.load(jina, adapter="retrieval.passage")
    rows = embedder.prompted_rows(["d e a b c"], embedder.prompt_text())  # after the task's prompt, "passage : "
    ids, segments = (np.array([row], "int32") for row in rows[0][:2])
    got = onnx_runner(str(tmp_path / "passage.onnx"))(ids, segments)
    np.testing.assert_allclose(got[0], embedder.encode(["d e a b c"])[0], atol=1e-5)
    assert "Loop" not in {node.op_type for node in onnx.load(str(tmp_path / "passage.onnx")).graph.node}
