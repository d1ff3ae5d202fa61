"""The model and GPU catalogues (models/engine/catalog.py): shapes give the published parameter counts and
KV sizes, a user's own config.json reads like a catalogue entry, bad ones are one-line input errors, and
vLLM's KV pool follows from the memory figures."""

from __future__ import annotations

import json

import pytest

from wadiloco.models.engine import catalog
from wadiloco.models.errors import InputError

# Parameter counts as their model cards state them (billions)
PUBLISHED = {
    "Llama-2-7b-hf": 6.74,
    "Llama-2-70b-hf": 68.98,
    "CodeLlama-34b-Instruct-hf": 33.74,
    "Mixtral-8x7B-v0.1": 46.70,
    "Llama-3-8B": 8.03,
    "Qwen2.5-0.5B-Instruct": 0.49,
    "Qwen2.5-1.5B-Instruct": 1.54,
    "Qwen2.5-3B-Instruct": 3.09,
    "Qwen2.5-7B-Instruct": 7.62,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_model_cards(name):
    shape = catalog.model(name)
    assert shape.params / 1e9 == pytest.approx(PUBLISHED[name], abs=0.006)


def test_kv_bytes_and_heads_per_gpu():
    llama3 = catalog.model("Llama-3-8B")
    assert llama3.kv_bytes_per_token == 131072  # docs/sources.md, Model shape: 128 KiB
    llama70 = catalog.model("meta-llama/Llama-2-70b-hf")  # its Hugging Face name, too
    assert llama70.kv_heads_per_gpu(4) == 2 and llama70.kv_heads_per_gpu(16) == 1  # replicated past 8
    assert llama70.kv_bytes_per_gpu_token(4) * 4 == llama70.kv_bytes_per_token


def test_a_mixture_of_experts_counts_its_active_experts():
    mix = catalog.model("mixtral-8x7b-v0.1")  # any case
    dense_mlp = 3 * mix.hidden * mix.ffn
    assert mix.experts == 8 and mix.experts_per_tok == 2
    assert mix.active_params_layer - mix.dense_params_layer == 2 * dense_mlp
    active = mix.layers * mix.active_params_layer + 2 * mix.head_params  # embedding and LM head
    assert active / 1e9 == pytest.approx(12.9, abs=0.05)  # "12.9B active parameters"


def test_a_config_json_by_path_reads_like_the_catalogue(tmp_path):
    cfg = {k: v for k, v in catalog.models()["Qwen2.5-7B-Instruct"].items() if k not in ("hf_id", "source")}
    folder = tmp_path / "qwen7"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    mine = catalog.model("qwen7/config.json", tmp_path)
    assert catalog.model("qwen7/", tmp_path) == mine  # a folder holding one
    ref = catalog.model("Qwen2.5-7B-Instruct")
    assert (mine.params, mine.kv_bytes_per_token, mine.qkv_bias) == (ref.params, ref.kv_bytes_per_token, True)
    wrapped = tmp_path / "vl.json"
    wrapped.write_text(json.dumps({"architectures": ["X"], "text_config": cfg}))
    assert catalog.model("vl.json", tmp_path).params == ref.params


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{not json", "not valid JSON"),
        ('{"hidden_size": 64}', "no 'num_attention_heads'"),
        ("[1, 2]", "expected a JSON object"),
        (
            '{"hidden_size": 64, "num_attention_heads": 0, "num_hidden_layers": 2, "intermediate_size": 8, '
            '"vocab_size": 10}',
            "not a decoder's config.json",
        ),
    ],
)
def test_a_bad_config_json_is_one_input_error(tmp_path, text, needle):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        catalog.model("config.json", tmp_path)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_unknown_names_list_the_catalogue(tmp_path):
    with pytest.raises(InputError, match="Llama-2-70b-hf") as e:
        catalog.model("Llama-9")
    assert "engine.model" in str(e.value)
    with pytest.raises(InputError, match="Hugging Face config.json not found"):
        catalog.model("missing/config.json", tmp_path)
    with pytest.raises(InputError, match="H100 SXM, H200, B200, A100-80GB, L40S"):
        catalog.gpu("H300")
    assert catalog.gpu("h100").name == "H100 SXM" and catalog.gpu("A100").name == "A100-80GB"


def test_gpu_figures_are_the_datasheets():
    h100, l40s = catalog.gpu("H100 SXM"), catalog.gpu("L40S")
    assert h100.flops == pytest.approx(989.4e12) and h100.hbm_bw == 3.35e12 and h100.link_bw == 900e9
    assert l40s.link_bw == l40s.pcie_bw  # no NVLink: GPU-GPU traffic crosses PCIe
    for name in catalog.gpus():
        g = catalog.gpu(name)
        assert g.hbm_bytes < catalog.gpus()[name]["hbm_gb"] * 1e9 * 1.1  # the driver's total, near nominal


def test_the_kv_pool_is_what_the_weights_and_activations_leave():
    shape, h100 = catalog.model("Llama-2-7b-hf"), catalog.gpu("H100 SXM")
    act = catalog.activation_bytes(shape, 1, 2048, 128)
    blocks, block = catalog.vllm_kv_blocks(shape, h100, 1, 0.9, act + catalog.NON_TORCH_BYTES, 16)
    assert block == 16 * 512 * 1024
    free = h100.hbm_bytes * 0.9 - shape.weight_bytes - act - catalog.NON_TORCH_BYTES
    assert blocks == int(free // block) and 7000 < blocks < 7500
    fewer, _ = catalog.vllm_kv_blocks(shape, h100, 1, 0.8, act + catalog.NON_TORCH_BYTES, 16)
    assert fewer < blocks
    big = catalog.model("Llama-2-70b-hf")
    assert catalog.vllm_kv_blocks(big, h100, 1, 0.9, 0.0, 16)[0] == 0  # 138 GB of weights on one 80 GB GPU
    assert catalog.vllm_kv_blocks(big, h100, 4, 0.9, 0.0, 16)[0] > 30000
