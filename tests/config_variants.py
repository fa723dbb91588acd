"""The config variants beyond `hf_lm.testing`'s cases, as ready models with inputs, for the sweeps that
must cover them too: the remote-code round trip (tests/test_model_properties.py), half precision
(tests/test_precision.py) and the simulated accelerator (tests/test_device_placement.py).

`hf_lm.testing` has each class with its family's default (`FAMILY_CASES`) and, as config overrides of
those, the GPT and BERT variant grids, ALBERT sharing and sparse attention (`VARIANT_CASES`, which
`make gpu-check` runs too). These are the rest, each needing more than a config override of the tiny
cases, a search of its own or a check of its own: Llama and BERT checkpoints imported from
transformers, experts with a capacity (GPT and Switch), and Mask-Predict's iterative decoding. Each is
built from the helpers of the module that tests its feature in process.
"""

from __future__ import annotations

import torch


def variant_models() -> list[tuple[str, object, str, list[tuple[dict, dict | None]]]]:
    """Every variant as (name, model in eval mode, auto class, checks); a check is (inputs, `generate()`
    arguments), None for a forward pass. Fresh models with weights drawn from seed 0."""
    from test_bert_convert import SIZES as BERT_SIZES
    from test_gpt_convert import llama_config, randomize
    from test_mask_predict import CASES as MASK_PREDICT_CASES
    from test_mask_predict import MASK, _source
    from test_moe import gpt_config as moe_gpt_config
    from test_moe import t5_config as moe_t5_config
    from transformers import BertConfig, BertForMaskedLM, LlamaForCausalLM

    from hf_lm import HfLmGPTForCausalLM, HfLmT5ForConditionalGeneration
    from hf_lm.convert import from_transformers

    torch.manual_seed(0)
    variants = []
    llama = from_transformers(randomize(LlamaForCausalLM(llama_config())))
    x = {"input_ids": torch.randint(3, llama.config.vocab_size, (2, 7))}
    variants.append(
        (
            "llama-imported",
            llama,
            "AutoModelForCausalLM",
            [(x, None), (x, dict(max_new_tokens=5, do_sample=False))],
        )
    )

    bert = from_transformers(BertForMaskedLM(BertConfig(**BERT_SIZES)))
    ids = torch.randint(3, bert.config.vocab_size, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    variants.append(
        ("bert-imported", bert, "AutoModelForMaskedLM", [({"input_ids": ids, "attention_mask": mask}, None)])
    )

    # experts with a capacity: a token over it is dropped, so a routing choice that rounding flips (bf16
    # autocast) moves the outputs far; not in hf_lm.testing's cases, whose autocast check compares them
    gpt = HfLmGPTForCausalLM(
        moe_gpt_config(capacity_factor=1.25, hidden_act="swiglu", mlp_bias=False, output_router_logits=True)
    )
    x = {"input_ids": torch.randint(3, gpt.config.vocab_size, (2, 7))}
    variants.append(
        (
            "gpt-moe-capacity",
            gpt,
            "AutoModelForCausalLM",
            [(x, None), (x, dict(max_new_tokens=5, do_sample=False))],
        )
    )
    switch = HfLmT5ForConditionalGeneration(moe_t5_config(expert_capacity=4, encoder_sparse_step=2))
    ids = torch.randint(3, switch.config.vocab_size, (2, 7))
    variants.append(
        ("t5-moe-capacity", switch, "AutoModelForSeq2SeqLM", [({"input_ids": ids, "labels": ids}, None)])
    )

    src, mask = _source()
    x = {"input_ids": src, "attention_mask": mask}
    target = dict(x, decoder_input_ids=torch.full((src.shape[0], 4), MASK))
    search = dict(num_iterations=3, length_beam=2, max_new_tokens=6)
    # BART's: T5's relative positions tie its all-mask first iteration exactly at mirrored positions, and
    # 1e-6 of rounding (another kernel, device or memory alignment) breaks those ties either way
    (bart,) = [case for case in MASK_PREDICT_CASES if case.name == "bart-mask-predict"]
    variants.append(
        (
            "bart-mask-predict-iterative",
            bart.make_model(),
            "AutoModelForMaskedLM",
            [(target, None), (x, search)],
        )
    )
    return [(name, model.eval(), auto, checks) for name, model, auto, checks in variants]
