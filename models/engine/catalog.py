"""Model shapes and GPUs, as data: what the physics latency law (models.engine.physics) and the KV pool
need to serve any model on any GPU.

A model is named by its catalogue name or Hugging Face name (models/data/models.json: the shapes the
project was checked on), or is a user's own Hugging Face `config.json` given by path (a file, or a
folder holding one). Its shape is the config's fields (Llama, Mistral and Mixtral, Qwen2 and Qwen2-MoE
use the same names); everything else is derived here: parameter counts (per layer, per expert, active
per token), weight bytes, KV bytes per token, KV heads per GPU under tensor parallelism. A GPU is named
by its catalogue name (models/data/gpus.json: datasheet figures; docs/sources.md, GPU datasheets).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import describe, json_text, read_text

# Bytes per element of a config's `torch_dtype` (vLLM's dtype `auto` serves a float16 or bfloat16
# checkpoint in its own dtype: 2 bytes either way).
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1, "fp8": 1}
GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape (a Hugging Face config's fields) and what follows from it.
    `ffn` is the intermediate size of one gated MLP: the dense MLP, or one expert of a mixture of
    experts (`experts` > 0, `experts_per_tok` of them per token; `shared_ffn` a shared expert's)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    experts: int = 0
    experts_per_tok: int = 0
    shared_ffn: int = 0
    tied: bool = False
    qkv_bias: bool = False
    dtype_bytes: int = 2
    max_position: int = 0

    @property
    def attn_params_layer(self) -> int:
        h, d = self.hidden, self.head_dim
        p = 2 * h * self.heads * d + 2 * h * self.kv_heads * d  # q and o, k and v
        return p + ((self.heads + 2 * self.kv_heads) * d if self.qkv_bias else 0)

    @property
    def expert_params(self) -> int:
        """One gated MLP (gate, up and down projections) of intermediate size `ffn`."""
        return 3 * self.hidden * self.ffn

    @property
    def dense_params_layer(self) -> int:
        """The weights every token of a layer uses: attention and norms, and the MLP of a dense model
        (a mixture of experts: its router and shared expert)."""
        p = self.attn_params_layer + 2 * self.hidden
        if self.experts:
            return p + self.hidden * self.experts + 3 * self.hidden * self.shared_ffn
        return p + self.expert_params

    @property
    def active_params_layer(self) -> int:
        """A layer's parameters one token multiplies: the dense part and experts_per_tok experts."""
        return self.dense_params_layer + self.experts_per_tok * self.expert_params

    @property
    def head_params(self) -> int:
        """The LM head's (vocab x hidden; tied or not, the logits GEMM reads one such matrix)."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        p = self.layers * (self.dense_params_layer + self.experts * self.expert_params)
        return p + self.head_params * (1 if self.tied else 2) + self.hidden

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over every layer (vLLM's KV spec: 2 x layers x kv_heads x head_dim x dtype)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def kv_heads_per_gpu(self, tp: int) -> float:
        """KV heads a GPU holds: sharded over the tensor-parallel group, replicated when fewer than its GPUs."""
        return max(self.kv_heads / tp, 1.0)

    def kv_bytes_per_gpu_token(self, tp: int) -> int:
        return int(2 * self.layers * self.kv_heads_per_gpu(tp) * self.head_dim * self.dtype_bytes)

    def describe(self) -> str:
        moe = f", {self.experts} experts, top-{self.experts_per_tok}" if self.experts else ""
        return (
            f"{self.name}: {self.params / 1e9:.2f} B parameters{moe}, {self.layers} layers, hidden {self.hidden}, "
            f"{self.heads} heads ({self.kv_heads} KV), KV {self.kv_bytes_per_token // 1024} KiB per token"
        )


@dataclass(frozen=True)
class GPU:
    """A GPU's datasheet figures, in SI units (FLOP/s, bytes, bytes/s)."""

    name: str
    flops: float  # peak dense bf16 tensor FLOP/s
    hbm_bytes: float  # memory as the driver reports its total (what vLLM's utilisation multiplies)
    hbm_bw: float  # peak memory bandwidth
    link_bw: float  # GPU-GPU link, both directions (NVLink, or PCIe without it)
    pcie_bw: float  # the host link, both directions
    link: str


def _whole(c: dict, key: str, default: int | None = None) -> int:
    """Field `key` of a config as a whole number >= 0 (a missing or null one: `default`; None: required)."""
    v = c.get(key)
    if v is None:
        if default is None:
            raise KeyError(key)
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1 << 40 or v != int(v):
        raise ValueError(f"{key} must be a whole number >= 0 (got {describe(v)})")
    return int(v)


def shape_from_config(cfg: dict, name: str) -> ModelShape:
    """A shape from a Hugging Face config's fields (a multimodal wrapper's `text_config` is the model).
    KeyError (a missing field) or ValueError (a bad one, described, never quoted) for a config that is
    not a decoder's."""
    c = dict(cfg)
    if isinstance(c.get("text_config"), dict) and "hidden_size" not in c:
        c = {**c, **c["text_config"]}
    hidden, heads = _whole(c, "hidden_size"), _whole(c, "num_attention_heads")
    if hidden < 1 or heads < 1:
        raise ValueError("hidden_size and num_attention_heads must be positive")
    experts = _whole(c, "num_local_experts", 0) or _whole(c, "num_experts", 0) or _whole(c, "n_routed_experts", 0)
    ffn = (_whole(c, "moe_intermediate_size", 0) if experts else 0) or _whole(c, "intermediate_size")
    archs = c.get("architectures") if isinstance(c.get("architectures"), list) else []
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16").replace("torch.", "")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"torch_dtype must be one of {', '.join(DTYPE_BYTES)} (got {describe(dtype)})")
    shape = ModelShape(
        name=name,
        hidden=hidden,
        layers=_whole(c, "num_hidden_layers"),
        heads=heads,
        kv_heads=_whole(c, "num_key_value_heads", 0) or heads,
        head_dim=_whole(c, "head_dim", 0) or hidden // heads,
        ffn=ffn,
        vocab=_whole(c, "vocab_size"),
        experts=experts,
        experts_per_tok=_whole(c, "num_experts_per_tok", 0) if experts else 0,
        shared_ffn=_whole(c, "shared_expert_intermediate_size", 0) if experts else 0,
        tied=c.get("tie_word_embeddings") is True,
        qkv_bias=c.get("attention_bias", str(archs[0] if archs else "").startswith("Qwen2")) is True,
        dtype_bytes=DTYPE_BYTES[dtype],
        max_position=_whole(c, "max_position_embeddings", 0),
    )
    sizes = (shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.ffn, shape.vocab)
    if min(sizes) < 1 or (shape.experts and not 1 <= shape.experts_per_tok <= shape.experts):
        raise ValueError("sizes must be positive (and 1 <= num_experts_per_tok <= experts)")
    return shape


def _packaged(name: str) -> dict:
    data = json.loads(resources.files("wadiloco.models.data").joinpath(name).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


@lru_cache(maxsize=1)
def models() -> dict[str, dict]:
    """The model catalogue: name -> its config fields (and `hf_id`, `source`)."""
    return _packaged("models.json")


@lru_cache(maxsize=1)
def gpus() -> dict[str, dict]:
    """The GPU catalogue: name -> its datasheet figures."""
    return _packaged("gpus.json")


def catalogue_name(name: str) -> str | None:
    """The catalogue's name for `name` (its own name or Hugging Face name, any case), or None."""
    low = name.lower()
    for key, cfg in models().items():
        if low in (key.lower(), str(cfg.get("hf_id", "")).lower()):
            return key
    return None


def is_model_path(name: str) -> bool:
    """Whether engine.model, not a catalogue name, names a file (it has a separator or ends in .json)."""
    return name.endswith(".json") or "/" in name or "\\" in name


def model(name: str, base_dir: str | Path = ".", field: str = "engine.model", file: object = None) -> ModelShape:
    """A catalogue model, or a config.json by path (relative to base_dir); InputErrors name `file` and `field`."""
    key = catalogue_name(name)
    if key is not None:
        return shape_from_config(models()[key], key)
    if not is_model_path(name):
        raise InputError(file, field, f"unknown model {name!r}: a catalogue name ({', '.join(models())}) or a path")
    return load_config(Path(base_dir) / name, file, field)


def load_config(path: Path, file: object = None, field: str = "engine.model") -> ModelShape:
    """A user's Hugging Face config.json (a folder: its config.json), read within the input limits."""
    path = path / "config.json" if path.is_dir() else path
    try:
        text = read_text(path, "Hugging Face config.json")
    except InputError as e:
        raise InputError(file if file is not None else path, field, f"{path}: {e.message}") from None
    cfg = json_text(text, path)
    if not isinstance(cfg, dict):
        raise InputError(path, "", f"not a decoder's config.json: expected a JSON object (got {describe(cfg)})")
    try:
        return shape_from_config(cfg, path.parent.name or path.stem)
    except KeyError as e:
        raise InputError(path, "", f"not a decoder's config.json: no {e.args[0]!r}") from None
    except ValueError as e:
        raise InputError(path, "", f"not a decoder's config.json: {e}") from None


def gpu(name: str, field: str = "engine.gpu", file: object = None) -> GPU:
    """A catalogue GPU by name, any case, or a name's unique beginning ("H100": H100 SXM)."""
    low = name.strip().lower()
    keys = [k for k in gpus() if k.lower() == low] or [k for k in gpus() if low and k.lower().startswith(low)]
    key = keys[0] if len(keys) == 1 else None
    if key is None:
        raise InputError(file, field, f"unknown GPU {name!r}: one of {', '.join(gpus())}")
    g = gpus()[key]
    return GPU(
        name=key,
        flops=g["dense_bf16_tflops"] * 1e12,
        hbm_bytes=g["hbm_total_mib"] * 2**20,
        hbm_bw=g["hbm_tb_s"] * 1e12,
        link_bw=g["link_gb_s"] * 1e9,
        pcie_bw=g["pcie_gb_s"] * 1e9,
        link=g["link"],
    )


# Per GPU, memory outside torch's allocator that vLLM's profiling sees (CUDA context, NCCL and cuBLAS
# workspaces): an assumption of 1.5 GiB (docs/serving_validation.md).
NON_TORCH_BYTES = 1.5 * GIB


def activation_bytes(shape: ModelShape, tp: int, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """Per GPU, the peak activation of vLLM's profiling pass (a forward pass of max_num_batched_tokens
    dummy tokens: the widest intermediate, gate and up, with the residual stream and q, k, v) and the
    sampler's fp32 logits for max_num_seqs rows (three copies)."""
    ffn = shape.ffn * (shape.experts_per_tok if shape.experts else 1)
    qkv = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    per_token = (2 * ffn + qkv) / tp + 4 * shape.hidden
    return max_num_batched_tokens * per_token * shape.dtype_bytes + 3 * max_num_seqs * shape.vocab * 4


def vllm_kv_blocks(
    shape: ModelShape, g: GPU, tp: int, utilization: float, reserve_bytes: float, block_size: int
) -> tuple[int, float]:
    """(KV blocks, bytes per block) of one engine: per GPU, memory x utilization less its share of the
    weights and `reserve_bytes` (activations and non-torch memory), in blocks of block_size tokens of
    the GPU's share of the KV heads (vLLM's memory profiler)."""
    block = block_size * shape.kv_bytes_per_gpu_token(tp)
    free = g.hbm_bytes * utilization - shape.weight_bytes / tp - reserve_bytes
    return int(free // block) if free > 0 else 0, block
