"""The offline embedder without torch: the ONNX graph built from the packaged weights.

Both backends give the same vectors (1,000 mixed texts), the graph is valid ONNX,
both packaged copies of the model are the same file, a model the builder cannot
read runs on torch, and a recall turn on the ONNX path imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.index.embedding_cache import identity_of
from fastaiagent.kb import embedding, model_files, onnx_embedding, onnx_graph
from fastaiagent.kb.embedding import LocalEmbedder

ENGLISH = (
    "the user said that my sister moved to Lisbon last spring and we talked about her new job at "
    "a small bakery near the river while planning a trip in April with two kids and a dog called "
    "Biscuit who is allergic to chicken so we buy special food every week from the shop downtown"
)
GERMAN = (
    "meine Schwester ist letztes Jahr nach München gezogen und arbeitet jetzt in einer kleinen "
    "Bäckerei am Fluss wir planen eine Reise im Frühling mit zwei Kindern und dem Hund Keks der "
    "gegen Hühnchen allergisch ist deshalb kaufen wir jede Woche besonderes Futter im Laden"
)
CHINESE = (
    "我的 妹妹 去年 搬到 上海 她 现在 在 一家 小 面包店 工作 我们 计划 春天 带着 两个 孩子 和 小狗 "
    "去 旅行 小狗 对 鸡肉 过敏 所以 每周 都 在 商店 买 特别 的 狗粮 天气 很好 我们 很 开心"
)
CODE = (
    "def recall ( query , limit = 10 ) : return [ hit . chunk . text for hit in index . search ( "
    "embed ( query ) , limit ) if hit . score > 0.5 ] class Memory : pass import numpy as np "
    "x = np . zeros ( ( 3 , 384 ) ) # comment SELECT id FROM facts WHERE user_id = $1 ; {\"key\": [1, 2]}"
)
LANGUAGES = {  # a vocabulary and what joins its words
    "en": (ENGLISH.split(), " "), "de": (GERMAN.split(), " "), "zh": (CHINESE.split(), ""), "code": (CODE.split(), " "),
}  # fmt: skip


def mixed_texts(count: int = 1000, seed: int = 48) -> list[str]:
    """``count`` texts of 1-300 words: English, German, Chinese (no spaces), code, and
    texts that switch language part-way; the same texts on every run. Lengths are
    log-uniform, as chat messages are mostly short: twenty in twenty-one of 1-30 words, one
    in twenty-one (of every kind) of 30-300, past the model's 256 tokens; so the test takes
    seconds, not minutes."""
    rng = random.Random(seed)
    kinds = [*LANGUAGES, "mixed"]
    texts = []
    for n in range(count):
        low, high = (30, 300) if n % 21 == 20 else (1, 30)
        words = 300 if n == 0 else round(math.exp(rng.uniform(math.log(low), math.log(high))))
        kind = kinds[n % len(kinds)]
        languages = [rng.choice(list(LANGUAGES)) for _ in range(3)] if kind == "mixed" else [kind]
        parts = []
        for i, language in enumerate(languages):
            vocabulary, joiner = LANGUAGES[language]
            share = words // len(languages) + (i < words % len(languages))
            parts.append(joiner.join(rng.choice(vocabulary) for _ in range(share)))
        texts.append(" ".join(p for p in parts if p))
    return texts


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """An empty graph cache and no model loaded: what a new machine's first process sees."""
    monkeypatch.setenv(onnx_embedding.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(onnx_embedding, "_MODELS", {})
    return tmp_path / "cache"


def test_mixed_texts_cover_every_language_and_length():
    texts = mixed_texts()
    assert len(texts) == 1000 and len(set(texts)) > 800 and texts == mixed_texts()
    lengths = [len(t.split()) for t in texts[::5]]  # English: a word a space
    assert min(lengths) == 1 and len(texts[0].split()) == 300 and sorted(lengths)[-2] >= 100
    assert any("我的" in t or "妹妹" in t for t in texts) and any("Bäckerei" in t for t in texts)
    assert any("np . zeros" in t or "def" in t.split() for t in texts)


@pytest.mark.embedder
@pytest.mark.slow
def test_onnx_and_torch_vectors_agree_on_1000_mixed_texts(fresh_cache):
    import numpy as np

    texts = mixed_texts()
    onnx = np.array(LocalEmbedder(backend="onnx").embed(texts))
    torch = np.array(LocalEmbedder(backend="torch").embed(texts))
    cosines = (onnx * torch).sum(axis=1) / (np.linalg.norm(onnx, axis=1) * np.linalg.norm(torch, axis=1))
    worst = int(cosines.argmin())
    assert cosines.min() >= 0.9999, f"cosine {cosines.min():.6f} for {texts[worst][:80]!r}"
    assert np.allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-5)
    assert list(fresh_cache.glob("onnx/*.onnx"))  # built here, from the weights, not a stale graph


def test_the_built_graph_is_valid_onnx(tmp_path):
    onnx = pytest.importorskip("onnx")  # the dev extra; the library writes the format itself
    files = model_files.packaged_model()
    model = onnx.load_from_string(b"".join(onnx_graph.build_graph(files)))  # weights inside
    onnx.checker.check_model(model, full_check=True)  # shapes inferred through every node
    assert [i.name for i in model.graph.input] == list(onnx_graph.INPUTS)
    assert [o.name for o in model.graph.output] == [onnx_graph.OUTPUT]
    assert model.opset_import[0].version == 17 and model.ir_version == 8
    onnx_embedding.write_graph(files, tmp_path / "g.onnx")  # weights beside it, as cached
    onnx.checker.check_model(str(tmp_path / "g.onnx"), full_check=True)
    beside = onnx.load(str(tmp_path / "g.onnx"))
    assert [onnx.numpy_helper.to_array(t).tolist() for t in beside.graph.initializer[:3]] == [
        onnx.numpy_helper.to_array(t).tolist() for t in model.graph.initializer[:3]
    ]


@pytest.mark.parametrize("source", ["folder", "archive"])
def test_both_packages_hold_the_one_known_model(source):
    """[local] reads the zip, [torch] the folder: the same weights and tokenizer, so the
    graph's cache name and the embedder's identity need not say which."""
    files = getattr(model_files, f"packaged_{source}")()
    assert files is not None, f"make test installs both packages (the {source} is missing)"
    assert hashlib.sha256(files.read_bytes("model.safetensors")).hexdigest() == model_files.PACKAGED_WEIGHTS_SHA256
    other = model_files.packaged_folder() if source == "archive" else model_files.packaged_archive()
    assert other is not None and files.read_bytes("tokenizer.json") == other.read_bytes("tokenizer.json")
    assert files.stamp() == other.stamp()


def test_graph_is_built_once_per_machine_and_reused(fresh_cache):
    expected = LocalEmbedder(backend="onnx").embed(["first"])
    graph = onnx_embedding.graph_path(model_files.packaged_model())
    weights = onnx_embedding.weights_path(graph)
    assert sorted(fresh_cache.glob("onnx/*")) == [weights, graph]  # no temporary left behind
    written = graph.stat().st_mtime_ns
    onnx_embedding._MODELS.clear()  # a new process
    assert LocalEmbedder(backend="onnx").embed(["first"]) == expected
    assert graph.stat().st_mtime_ns == written
    weights.unlink()  # a cache half cleaned: built again, not a broken load
    onnx_embedding._MODELS.clear()
    assert LocalEmbedder(backend="onnx").embed(["first"]) == expected
    assert weights.exists() and graph.stat().st_mtime_ns != written


def test_both_backends_are_one_embedder_identity():
    assert identity_of(LocalEmbedder(backend="onnx")) == identity_of(LocalEmbedder(backend="torch"))
    assert identity_of(LocalEmbedder()) == identity_of(LocalEmbedder(backend="torch"))


def copy_of_the_model(tmp_path: Path, **config_changes: object) -> Path:
    """A folder model: the packaged files, ``config.json`` changed as given."""
    folder = tmp_path / "model"
    files = model_files.packaged_model()
    for name in ("config.json", "modules.json", "1_Pooling/config.json", "sentence_bert_config.json",
                 "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "config_sentence_transformers.json", "model.safetensors"):  # fmt: skip
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(files.read_bytes(name))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    return folder


@pytest.mark.embedder
def test_a_model_of_ones_own_runs_on_onnx_with_the_same_vectors(tmp_path, fresh_cache):
    folder = copy_of_the_model(tmp_path)
    texts = ["a model of my own", "noch ein Satz"]
    mine = LocalEmbedder(model_path=str(folder), backend="onnx").embed(texts)
    packaged = LocalEmbedder(backend="onnx").embed(texts)
    assert [m == pytest.approx(p, abs=1e-6) for m, p in zip(mine, packaged, strict=True)] == [True, True]
    assert len(list(fresh_cache.glob("onnx/*.onnx"))) == 2  # its own graph, named by its files


@pytest.mark.embedder
def test_a_model_the_builder_cannot_read_runs_on_torch(tmp_path, fresh_cache, monkeypatch, caplog):
    folder = copy_of_the_model(tmp_path, position_embedding_type="relative_key")
    with pytest.raises(InvalidValueError, match=r"position_embedding_type 'relative_key'.*backend='torch'"):
        LocalEmbedder(model_path=str(folder), backend="onnx").embed(["x"])
    monkeypatch.setattr(embedding, "_onnx_warned", threading.Event())
    with caplog.at_level(logging.WARNING):
        auto = LocalEmbedder(model_path=str(folder))
        assert len(auto.embed(["x"])[0]) == 384
    assert "runs on torch: ONNX Runtime could not load the model" in caplog.text
    assert auto._onnx() is None and not list(fresh_cache.glob("onnx/*.onnx"))


def test_the_builder_says_what_it_cannot_read(tmp_path):
    folder = copy_of_the_model(tmp_path, model_type="roberta", hidden_act="relu")
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (folder / "model.safetensors").unlink()
    with pytest.raises(InvalidValueError) as raised:
        onnx_graph.readable(model_files.model_files(str(folder)))
    for reason in ("model_type 'roberta'", "hidden_act 'relu'", "not mean pooling", "no model.safetensors",
                   "pip install 'fastaiagent[torch]'"):  # fmt: skip
        assert reason in str(raised.value)


def test_a_missing_model_names_the_fix(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="embedding model directory not found"):
        LocalEmbedder(model_path=str(tmp_path / "nowhere"), backend="onnx").embed(["x"])
    for name in ("packaged_folder", "packaged_archive"):
        monkeypatch.setattr(model_files, name, lambda: None)
    with pytest.raises(ImportError, match=r"pip install 'fastaiagent\[local\]'"):
        model_files.packaged_model()
    monkeypatch.setattr(embedding, "packaged_folder", lambda: None)
    with pytest.raises(ImportError, match=r"pip install 'fastaiagent\[torch\]'"):
        LocalEmbedder(backend="torch").embed(["x"])


BLOCKED = ("torch", "transformers", "scipy", "sklearn", "sentence_transformers", "onnx")

RECALL_TURN = """
import importlib.abc, json, sys

class Refuse(importlib.abc.MetaPathFinder):
    # These are installed (make test installs torch): refusing them proves the turn needs none.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked}:
            raise ModuleNotFoundError(f"refused in this test: {{name}}")
        return None

sys.meta_path.insert(0, Refuse())
from fastaiagent import Agent, Memory
from fastaiagent.kb.embedding import get_embedder
from fastaiagent.testing import CannedLLM

embedder = get_embedder("auto")
location = "sqlite:///" + sys.argv[1]
first = Memory(location, user_id="ann", recall="auto", embedder=embedder)
Agent(name="a", llm=CannedLLM("Noted."), memory=first).run("I adopted a beagle called Biscuit last week")
first.flush()
memory = Memory(location, user_id="ann", recall="auto", embedder=embedder)  # a later session: only recall brings it back
llm = CannedLLM("ok")
Agent(name="a", llm=llm, memory=memory).run("what is my dog called?")
prompt = " ".join(m.content or "" for m in llm.calls[-1])
print(json.dumps({{
    "recalled": "Biscuit" in prompt,
    "onnx": embedder._onnx_model is not None,
    "loaded": sorted({{m.split(".")[0] for m in sys.modules}} & set({blocked})),
}}))
"""


@pytest.mark.embedder
@pytest.mark.subprocess
def test_a_recall_turn_on_onnx_imports_no_torch(tmp_path):
    script = textwrap.dedent(RECALL_TURN).format(blocked=repr(set(BLOCKED)))
    env = {**os.environ, "FASTAIAGENT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "m.db")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"recalled": True, "onnx": True, "loaded": []}
    assert "runs on torch" not in done.stderr
    assert list((tmp_path / "cache" / "onnx").glob("*.onnx"))  # the graph was built in there, without torch
