"""Which token stream each DiT weight runs over (geometry.token_rule), one name per rule and per fallback,
with the names as the original checkpoints spell them."""

from __future__ import annotations

import pytest

from mpsup.model.geometry import CLIP_IMAGE_TOKENS, Geometry, token_rule

IMG, TXT = 4096, 512


@pytest.mark.parametrize(
    ("arch", "name", "tokens"),
    [
        ("flux", "double_blocks.0.img_mod.lin.weight", 1),
        ("flux", "single_blocks.3.modulation.lin.weight", 1),  # a modulation, though in a single block
        ("flux", "time_in.in_layer.weight", 1),
        ("flux", "vector_in.in_layer.weight", 1),
        ("flux", "guidance_in.out_layer.weight", 1),
        ("flux", "final_layer.adaLN_modulation.1.weight", 1),
        ("flux", "txt_in.weight", TXT),
        ("flux", "double_blocks.0.txt_attn.qkv.weight", TXT),
        ("flux", "double_blocks.0.txt_mlp.0.weight", TXT),
        ("flux", "single_blocks.0.linear1.weight", IMG + TXT),
        ("flux", "double_blocks.0.img_attn.qkv.weight", IMG),
        ("flux", "img_in.weight", IMG),
        ("flux", "model.single_blocks.0.linear1.weight", IMG),  # a prefixed name is not a single block
        ("sd3", "joint_blocks.0.x_block.adaLN_modulation.1.weight", 1),
        ("sd3", "t_embedder.mlp.0.weight", 1),
        ("sd3", "y_embedder.mlp.2.weight", 1),
        ("sd3", "joint_blocks.0.context_block.attn.qkv.weight", TXT),
        ("sd3", "context_embedder.weight", TXT),
        ("sd3", "joint_blocks.0.x_block.attn.qkv.weight", IMG),
        ("sd3", "x.context_embedder.weight", IMG),
        ("wan", "time_embedding.0.weight", 1),
        ("wan", "time_projection.1.weight", 1),
        ("wan", "blocks.0.modulation", 1),
        ("wan", "text_embedding.0.weight", TXT),
        ("wan", "blocks.0.cross_attn.k.weight", TXT),
        ("wan", "blocks.0.cross_attn.v.weight", TXT),
        ("wan", "blocks.0.cross_attn.k_img.weight", CLIP_IMAGE_TOKENS),
        ("wan", "img_emb.proj.1.weight", CLIP_IMAGE_TOKENS),
        ("wan", "blocks.0.cross_attn.q.weight", IMG),
        ("wan", "blocks.0.self_attn.k.weight", IMG),
        ("wan", "patch_embedding.weight", IMG),
    ],
)
def test_token_rule_names_each_weights_stream(arch: str, name: str, tokens: int):
    rule = token_rule(Geometry(arch, 1024, 1024, 1, IMG, TXT))
    assert rule is not None
    assert rule(name) == tokens


@pytest.mark.parametrize("arch", ["ldm-unet", "ldm-vae", "llama"])
def test_no_token_rule_outside_the_dits(arch: str):
    assert token_rule(Geometry(arch, 512, 512, 1, 0, 0)) is None
