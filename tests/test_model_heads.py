"""Tied output heads decided from the config: an encoder has none; only a word embedding can be one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpsup.model.config import model_config
from mpsup.model.extract import extract
from mpsup.model.safetensors_header import ITEMSIZE, ModelFormatError, TensorInfo

CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "model-configs"


def _t(name: str, shape: tuple[int, ...], dtype: str = "F32") -> TensorInfo:
    n = 1
    for d in shape:
        n *= d
    return TensorInfo(name, dtype, shape, n * ITEMSIZE[dtype])


def bert_like(prefix: str = "", hidden: int = 384, vocab: int = 30522, layers: int = 1) -> dict[str, TensorInfo]:
    """all-MiniLM-L6-v2's published key layout (BertModel), at its real embedding sizes."""
    e = prefix + "embeddings."
    ts = [
        _t(e + "word_embeddings.weight", (vocab, hidden)),
        _t(e + "position_embeddings.weight", (512, hidden)),
        _t(e + "token_type_embeddings.weight", (2, hidden)),
        _t(e + "LayerNorm.weight", (hidden,)),
        _t(prefix + "pooler.dense.weight", (hidden, hidden)),
    ]
    for i in range(layers):
        p = f"{prefix}encoder.layer.{i}."
        ts += [
            _t(p + "attention.self.query.weight", (hidden, hidden)),
            _t(p + "attention.self.key.weight", (hidden, hidden)),
            _t(p + "attention.self.value.weight", (hidden, hidden)),
            _t(p + "attention.output.dense.weight", (hidden, hidden)),
            _t(p + "intermediate.dense.weight", (4 * hidden, hidden)),
            _t(p + "output.dense.weight", (hidden, 4 * hidden)),
        ]
    return {t.name: t for t in ts}


def _heads(ex) -> list[tuple[int, int]]:
    return sorted(
        {(w.params["in_features"], w.params["out_features"]) for w in ex.workloads if w.role == "output-head"}
    )


def _minilm_config() -> dict:
    path = CONFIGS / "minilm-l6__gubartz_st_minilm_pubmed_rct__config.json"
    if not path.is_file():
        pytest.skip(f"shared model configs not present ({path})")
    return json.loads(path.read_text())


def test_minilm_with_its_config_has_no_head():
    ex = extract(bert_like(), _minilm_config(), tokens=(1,))
    assert _heads(ex) == []
    assert sum(w.count for w in ex.workloads if w.kind == "embedding") == 3


def test_bare_bert_file_without_config_has_no_head():
    assert _heads(extract(bert_like(), None, tokens=(1,))) == []


def test_masked_lm_ties_only_the_word_embedding():
    ts = bert_like("bert.")
    ts["cls.predictions.transform.dense.weight"] = _t("cls.predictions.transform.dense.weight", (384, 384))
    cfg = {**_minilm_config(), "architectures": ["BertForMaskedLM"]}
    assert _heads(extract(ts, cfg, tokens=(1,))) == [(384, 30522)]
    assert _heads(extract(ts, None, tokens=(1,))) == [(384, 30522)]


def test_config_overrules_names_and_tie_flag():
    ts = bert_like()
    assert _heads(extract(ts, {"architectures": ["BertForMaskedLM"]}, tokens=(1,))) == [(384, 30522)]
    assert _heads(extract(ts, {"architectures": ["BertForMaskedLM"], "tie_word_embeddings": False}, tokens=(1,))) == []
    assert _heads(extract(ts, {"model_type": "bert"}, tokens=(1,))) == []


def test_decoder_without_lm_head_tensor_is_tied_once():
    ts = {
        t.name: t
        for t in [_t("model.embed_tokens.weight", (1000, 64)), _t("model.layers.0.mlp.up_proj.weight", (128, 64))]
    }
    ex = extract(ts, {"architectures": ["Qwen3ForCausalLM"]}, tokens=(1,))
    assert [(w.count, w.params["out_features"]) for w in ex.workloads if w.role == "output-head"] == [(1, 1000)]


@pytest.mark.parametrize("doc", [{"architectures": "BertModel"}, {"architectures": [1]}, {"model_type": 5}])
def test_bad_head_fields_are_one_line(doc):
    with pytest.raises(ModelFormatError, match=r"architectures|model_type"):
        model_config(doc, "config.json")
