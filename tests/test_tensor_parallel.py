"""Tensor parallelism (`from_pretrained(tp_plan="auto")`) and the head-grouped q/k/v layout it needs.

The self-attention's fused projection `query_key_value` holds its rows grouped by key/value head, so
transformers' plain "colwise" split gives each process whole groups. Checkpoints from before that
layout (`qkv_proj`, rows [all q; all k; all v]) still load: saved folders through `from_pretrained`,
raw state dicts (training checkpoints, converters) through the attention's load hook, the optimizer's
moments through `training.state.checkpoint`. The multi-process runs use gloo on the CPU (torchrun).
"""

import subprocess

import pytest
import torch
from conftest import TORCHRUN_2
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
)
from hf_lm.models.hflm_attention import grouped_qkv_order
from training.state.checkpoint import load_checkpoint, save_checkpoint
from training.state.stateful import CheckpointState

SMALL = dict(
    vocab_size=97, hidden_size=64, num_hidden_layers=2, intermediate_size=64, max_position_embeddings=64
)
# name -> (model class, config); head counts divide by 2 and 4 (whole key/value groups per process)
VARIANTS = {
    # MHA, ALiBi (a per-head bias in the mask: each process takes its heads' slice), biases
    "gpt_mha_alibi": (
        HfLmGPTForCausalLM,
        HfLmGPTConfig(
            **SMALL,
            num_attention_heads=4,
            position_embedding_type="alibi",
            attention_bias=True,
            mlp_bias=True,
        ),
    ),
    # GQA (2 query heads per key/value head), RoPE, SwiGLU (the packed gate/up split)
    "gpt_gqa_rope": (
        HfLmGPTForCausalLM,
        HfLmGPTConfig(
            **SMALL,
            num_attention_heads=8,
            num_key_value_heads=4,
            position_embedding_type="rope",
            hidden_act="swiglu",
        ),
    ),
    # a mixture of experts in every other layer: each expert sharded, the router replicated
    "gpt_moe": (
        HfLmGPTForCausalLM,
        HfLmGPTConfig(
            **SMALL, num_attention_heads=4, num_local_experts=2, num_experts_per_tok=2, decoder_sparse_step=2
        ),
    ),
    # T5's relative-position buckets (a per-head bias), gated-GELU, cross-attention
    "t5": (
        HfLmT5ForConditionalGeneration,
        HfLmT5Config(**SMALL, num_attention_heads=4, hidden_act="geglu_tanh", hidden_dropout=0.0),
    ),
    "bart": (
        HfLmBartForConditionalGeneration,
        HfLmBartConfig(**SMALL, num_attention_heads=4, hidden_dropout=0.0),
    ),
}


def _model(name: str):
    cls, config = VARIANTS[name]
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # T5/BART start with zero biases and similar rows: make every weight count
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model


def _inputs(model) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (2, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # a padded row
    forward = {"input_ids": ids, "attention_mask": mask}
    if model.config.is_encoder_decoder:
        forward["decoder_input_ids"] = torch.randint(3, 97, (2, 5), generator=g)
        return {"forward": forward, "generate": {"input_ids": ids, "attention_mask": mask}}
    return {"forward": forward, "generate": {"input_ids": ids[:, :4], "attention_mask": mask[:, :4]}}


def _outputs(model, inputs: dict) -> dict:
    with torch.no_grad():
        logits = model(**inputs["forward"]).logits
        tokens = model.generate(**inputs["generate"], max_new_tokens=6, do_sample=False)
    return {"logits": logits, "tokens": tokens}


def to_stacked_layout(state_dict: dict, model) -> dict:
    """A state dict as hf_lm wrote it before the head-grouped layout: `qkv_proj`, rows [q; k; v]."""
    out = {}
    for key, tensor in state_dict.items():
        if ".query_key_value." in key:
            attn = model.get_submodule(key.split(".query_key_value.")[0])
            tensor = tensor[grouped_qkv_order(attn.num_heads, attn.num_kv_heads, attn.head_dim).argsort()]
            key = key.replace(".query_key_value.", ".qkv_proj.")
        out[key] = tensor
    return out


def _save_stacked_folder(model, folder) -> None:
    """`save_pretrained` as hf_lm did it before the head-grouped layout."""
    model.save_pretrained(folder)
    weights = folder / "model.safetensors"
    save_file(to_stacked_layout(load_file(weights), model), weights, metadata={"format": "pt"})


def _auto(model):
    return AutoModelForSeq2SeqLM if model.config.is_encoder_decoder else AutoModelForCausalLM


@pytest.mark.parametrize("name", ["gpt_gqa_rope", "t5", "bart"])
def test_folder_saved_before_the_grouped_layout_loads_and_resaves_grouped(tmp_path, name):
    """A folder with `qkv_proj` in the stacked layout loads to the same logits; saving it again writes
    the grouped `query_key_value` (not the old layout back), which loads to the same logits too."""
    model = _model(name)
    inputs = _inputs(model)
    expected = _outputs(model, inputs)
    _save_stacked_folder(model, tmp_path / "old")
    assert any(".qkv_proj." in key for key in load_file(tmp_path / "old" / "model.safetensors"))
    loaded = _auto(model).from_pretrained(tmp_path / "old", dtype=torch.float32).eval()
    got = _outputs(loaded, inputs)
    torch.testing.assert_close(got["logits"], expected["logits"], rtol=1e-5, atol=1e-5)
    assert torch.equal(got["tokens"], expected["tokens"])

    loaded.save_pretrained(tmp_path / "new")
    keys = load_file(tmp_path / "new" / "model.safetensors")
    assert not any(".qkv_proj." in k for k in keys) and any(".query_key_value." in k for k in keys)
    again = _auto(model).from_pretrained(tmp_path / "new", dtype=torch.float32).eval()
    torch.testing.assert_close(_outputs(again, inputs)["logits"], expected["logits"], rtol=1e-5, atol=1e-5)


def test_training_checkpoint_from_before_the_grouped_layout_resumes_exactly(tmp_path):
    """A raw training checkpoint (model state dict and AdamW state) in the stacked layout resumes to
    the same next step as the run that never stopped: weights and Adam's moments are regrouped."""
    model = _model("gpt_gqa_rope").train()
    batch = {"input_ids": torch.randint(3, 97, (2, 9)), "labels": torch.randint(3, 97, (2, 9))}

    def step(m, opt):
        opt.zero_grad()
        m(**batch).loss.backward()
        opt.step()

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step(model, opt)
    folder = save_checkpoint(tmp_path / "ckpt", CheckpointState(model, optimizer=opt, rng=None), step=1)
    # rewrite it as a checkpoint of the stacked layout: weights renamed and reordered, moments reordered
    weights = folder / "model.safetensors"
    save_file(to_stacked_layout(load_file(weights), model), weights, metadata={"format": "pt"})
    opt_state = torch.load(folder / "optimizer.pt")
    names = [n for n, _ in model.named_parameters()]
    for index, state in opt_state["state"].items():
        if ".query_key_value." in names[index]:
            for field in ("exp_avg", "exp_avg_sq"):
                state[field] = to_stacked_layout({names[index]: state[field]}, model).popitem()[1]
    torch.save(opt_state, folder / "optimizer.pt")

    resumed = _model("gpt_gqa_rope").train()
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    load_checkpoint(folder, CheckpointState(resumed, optimizer=resumed_opt, rng=None), verify=False)
    step(model, opt)
    step(resumed, resumed_opt)
    for (name, a), b in zip(model.named_parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=name)


def test_base_model_tp_plan_names_the_modules_each_config_builds():
    """Every rule of the plan matches a module of the model (no rule transformers would skip), and every
    Linear of the blocks but the routers is in it."""
    for name, (cls, config) in VARIANTS.items():
        model = cls(config)
        base = model.base_model
        modules = {n for n, _ in base.named_modules()}
        plan = config.base_model_tp_plan
        for rule in plan:
            assert any(_matches(rule, m) for m in modules), (name, rule)
        linears = [
            n for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in f".{n}"
        ]
        unplanned = [n for n in linears if not any(_matches(r, n) for r in plan) and not n.endswith(".gate")]
        assert unplanned == [], (name, unplanned)
        assert model._tp_plan.get("lm_head") == "colwise_gather_output"


def _matches(rule: str, name: str) -> bool:
    parts, names = rule.split("."), name.split(".")
    return len(parts) == len(names) and all(
        p == n or (p == "*" and n.isdigit()) for p, n in zip(parts, names)
    )


def test_tensor_parallelism_refuses_heads_it_cannot_split(tmp_path):
    """3 key/value heads cannot be split over 2 processes: a ValueError naming the field, before any
    weight is sharded."""
    from transformers.distributed import DistributedConfig

    model = HfLmGPTForCausalLM(
        HfLmGPTConfig(**SMALL, num_attention_heads=6, num_key_value_heads=3, head_dim=8)
    )
    with pytest.raises(ValueError, match="num_key_value_heads"):
        model._resolve_parallel_plans(DistributedConfig(tp_size=2))


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_tensor_parallel_equals_one_process(tmp_path, processes):
    """`from_pretrained(tp_plan="auto")` on 2 and 4 processes gives the one-process logits and greedy
    tokens for GPT (MHA with ALiBi, GQA with RoPE, a mixture of experts), T5 and BART, and a folder
    saved in the stacked layout loads sharded too. Every planned projection is really split."""
    expected, folders = {}, []
    for name in VARIANTS:
        model = _model(name)
        inputs = _inputs(model)
        folder = tmp_path / name
        model.save_pretrained(folder)
        torch.save(inputs, folder / "inputs.pt")
        expected[str(folder)] = _outputs(model, inputs)
        folders.append(folder)
        if name == "gpt_gqa_rope":  # also from a folder of the stacked layout
            _save_stacked_folder(model, tmp_path / "stacked")
            torch.save(inputs, tmp_path / "stacked" / "inputs.pt")
            expected[str(tmp_path / "stacked")] = expected[str(folder)]
            folders.append(tmp_path / "stacked")
    out = tmp_path / "out.pt"
    cmd = [*TORCHRUN_2[:-1], str(processes), "tests/tensor_parallel_worker.py", str(out), *map(str, folders)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    got = torch.load(out)
    for folder, want in expected.items():
        run = got[folder]
        assert run["tp_size"] == processes
        torch.testing.assert_close(run["logits"], want["logits"], rtol=1e-5, atol=1e-5, msg=folder)
        assert torch.equal(run["tokens"], want["tokens"]), folder
        assert any("query_key_value" in n for n in run["sharded"]), (folder, run["sharded"])
        assert any("o_proj" in n for n in run["sharded"]) and any("down_proj" in n for n in run["sharded"])
    assert any(
        "experts.1.gate_up_proj" in n or "experts.1.up_proj" in n
        for n in got[str(tmp_path / "gpt_moe")]["sharded"]
    )
    assert any("cross_attn.kv_proj" in n for n in got[str(tmp_path / "t5")]["sharded"])
