"""The tests' tiny model configs, one of each kind, and the Llama folder written from one: small enough that
transformers and diffusers build them in a moment, shaped like the real ones (grouped-query attention, a
VAE of two levels, a UNet with cross-attention). A test that needs another size derives it here or beside
itself with `{**LLAMA, ...}`, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Two blocks: a repeated block is what the depth fit and the per-layer census count.
LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
}
# Four blocks: room for the whole-model tests to fit a prefix of them under a memory cap.
DEEP_LLAMA = {**LLAMA, "num_hidden_layers": 4}
MIXTRAL = {
    **DEEP_LLAMA,
    "model_type": "mixtral",
    "architectures": ["MixtralForCausalLM"],
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}
QWEN3_MOE = {
    **DEEP_LLAMA,
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "head_dim": 16,
}
BERT = {
    "model_type": "bert",
    "architectures": ["BertModel"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}
VAE = {
    "_class_name": "AutoencoderKL",
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "block_out_channels": [8, 16],
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
    "layers_per_block": 1,
    "norm_num_groups": 4,
}
UNET = {
    "_class_name": "UNet2DConditionModel",
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": [8, 16],
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
    "layers_per_block": 1,
    "cross_attention_dim": 16,
    "attention_head_dim": 2,
    "norm_num_groups": 4,
}
WAN_VAE = {
    "_class_name": "AutoencoderKLWan",
    "base_dim": 8,
    "z_dim": 4,
    "dim_mult": [1, 2],
    "num_res_blocks": 1,
    "temperal_downsample": [True],  # one halving in time: 1 + 2k frames -> 1 + k latent frames
    "latents_mean": [0.0] * 4,
    "latents_std": [1.0] * 4,
}


def write_llama_folder(folder: Path, config: dict[str, Any] = LLAMA) -> Path:
    """A Transformers folder (config.json and random safetensors weights) built from `config`."""
    import transformers  # the test extra's: only the tests that write a folder need it

    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
    model.save_pretrained(folder)
    return folder
