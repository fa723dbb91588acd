"""The config variants beyond `hf_lm.testing`'s cases, as ready models with inputs, for the sweeps that
must cover them too: the remote-code round trip (tests/test_model_properties.py), half precision
(tests/test_precision.py) and the simulated accelerator (tests/test_device_placement.py).

`hf_lm.testing` has each class with its family's default (`FAMILY_CASES`) and the GPT and BERT variant
grids (`VARIANT_CASES`: positions, norms, activations, grouped queries). These are the rest, each
needing more than a config override of the tiny cases or a search of its own: ALBERT's factorized and
shared GPT, mixtures of experts with a capacity, sparse attention, Llama and BERT checkpoints imported
from transformers, and Mask-Predict's iterative decoding. Each config is defined once, in the module
that tests its feature in process.
"""

from __future__ import annotations

import torch


def variant_models() -> list[tuple[str, object, str, list[tuple[dict, dict | None]]]]:
    """Every variant as (name, model in eval mode, auto class, checks); a check is (inputs, `generate()`
    arguments), None for a forward pass. Fresh models with weights drawn from seed 0."""
    from conftest import tiny_gpt_config
    from test_bert_convert import SIZES as BERT_SIZES
    from test_gpt_convert import llama_config, randomize
    from test_mask_predict import CASES as MASK_PREDICT_CASES
    from test_mask_predict import MASK, _source
    from test_moe import gpt_config as moe_gpt_config
    from test_moe import t5_config as moe_t5_config
    from test_sparse_attention import bert as sparse_bert
    from test_sparse_attention import gpt as sparse_gpt
    from test_sparse_attention import padded_batch
    from transformers import BertConfig, BertForMaskedLM, LlamaForCausalLM

    from hf_lm import HfLmGPTForCausalLM, HfLmT5ForConditionalGeneration
    from hf_lm.convert import from_transformers

    torch.manual_seed(0)
    greedy = dict(max_new_tokens=5, do_sample=False)
    decoders = {
        "gpt-albert": HfLmGPTForCausalLM(
            tiny_gpt_config(embedding_size=16, num_hidden_layers=3, num_hidden_groups=1)
        )
    }
    decoders["gpt-moe-capacity"] = HfLmGPTForCausalLM(
        moe_gpt_config(capacity_factor=1.25, hidden_act="swiglu", mlp_bias=False, output_router_logits=True)
    )
    decoders["llama-imported"] = from_transformers(randomize(LlamaForCausalLM(llama_config())))
    variants = []
    for name, model in decoders.items():
        x = {"input_ids": torch.randint(3, model.config.vocab_size, (2, 7))}
        variants.append((name, model, "AutoModelForCausalLM", [(x, None), (x, greedy)]))
    ids, mask = padded_batch("gpt", T=6)
    x = {"input_ids": ids, "attention_mask": mask}
    band = [(x, None), (x, dict(greedy, max_new_tokens=10))]
    variants.append(("gpt-band-dilated", sparse_gpt("band+dilated"), "AutoModelForCausalLM", band))

    encoders = {"bert-imported": from_transformers(BertForMaskedLM(BertConfig(**BERT_SIZES)))}
    for name, model in encoders.items():
        ids = torch.randint(3, model.config.vocab_size, (2, 7))
        mask = torch.ones_like(ids)
        mask[1, 5:] = 0
        variants.append(
            (name, model, "AutoModelForMaskedLM", [({"input_ids": ids, "attention_mask": mask}, None)])
        )
    ids, mask = padded_batch("bert")
    x = {"input_ids": ids, "attention_mask": mask}
    variants.append(("bert-band-global-random", sparse_bert("band+global+random"), "AutoModel", [(x, None)]))

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
