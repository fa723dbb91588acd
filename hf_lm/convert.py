"""Import weights from transformers' reference models into hf_lm models with identical outputs.

This is how users start from real GPT-2, Llama, Mistral, Mixtral, BERT, ELECTRA, T5, SwitchTransformers or BART checkpoints::

    from transformers import AutoModelForCausalLM
    from hf_lm.convert import from_transformers

    reference = AutoModelForCausalLM.from_pretrained("openai-community/gpt2")
    model = from_transformers(reference)  # an HfLmGPTForCausalLM with the same logits
    model.save_pretrained("gpt2-hflm")

The parity tests (`tests/test_gpt_convert.py`) are our proof that each hf_lm variant is the real thing.
"""

from __future__ import annotations

import copy
import logging

import torch

from .families import FAMILIES
from .models.hflm_configuration_bert import HfLmBertConfig
from .models.hflm_configuration_electra import HfLmElectraConfig
from .models.hflm_configuration_gpt import HfLmGPTConfig
from .models.hflm_configuration_seq2seq import HfLmBartConfig, HfLmT5Config

logger = logging.getLogger(__name__)

_GPT2_ACTS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
_LLAMA_ACTS = {"silu": "swiglu", "gelu": "geglu", "relu": "reglu"}
_BERT_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


def _common_kwargs(ref) -> dict:
    kwargs = {"vocab_size": ref.vocab_size}
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = getattr(ref, name, None)
        ids = value if isinstance(value, list) else [value]
        if any(i is not None and not 0 <= i < ref.vocab_size for i in ids):
            # transformers only warns about these (some Hub configs carry them); hf_lm configs refuse them
            logger.warning(
                "Dropping %s=%s: outside the vocabulary of %d tokens.", name, value, ref.vocab_size
            )
            value = None
        kwargs[name] = value
    if ref.id2label is not None:
        kwargs["id2label"] = dict(ref.id2label)
        kwargs["label2id"] = dict(ref.label2id)
    if getattr(ref, "problem_type", None) is not None:
        kwargs["problem_type"] = ref.problem_type
    return kwargs


def _gpt2_config(ref) -> HfLmGPTConfig:
    if ref.activation_function not in _GPT2_ACTS:
        raise ValueError(f"GPT-2 activation_function={ref.activation_function!r} has no hf_lm equivalent.")
    if not ref.scale_attn_weights or ref.scale_attn_by_inverse_layer_idx or ref.add_cross_attention:
        raise ValueError(
            "Only standard GPT-2 attention converts (scale_attn_weights=True, "
            "scale_attn_by_inverse_layer_idx=False, add_cross_attention=False)."
        )
    return HfLmGPTConfig(
        hidden_size=ref.n_embd,
        num_hidden_layers=ref.n_layer,
        num_attention_heads=ref.n_head,
        intermediate_size=ref.n_inner or 4 * ref.n_embd,
        hidden_act=_GPT2_ACTS[ref.activation_function],
        position_embedding_type="learned",
        max_position_embeddings=ref.n_positions,
        norm_type="layernorm",
        norm_position="pre",
        norm_eps=ref.layer_norm_epsilon,
        attention_bias=True,
        mlp_bias=True,
        hidden_dropout=float(ref.resid_pdrop),
        attention_dropout=float(ref.attn_pdrop),
        initializer_range=ref.initializer_range,
        tie_word_embeddings=bool(ref.tie_word_embeddings),
        **_common_kwargs(ref),
    )


def _gpt2_state_dict(sd: dict, config, ref_config) -> dict:
    """GPT-2 uses Conv1D, whose weights are (in, out): transpose them for nn.Linear."""
    num_layers = config.num_hidden_layers
    out = {}
    p = "transformer." if any(k.startswith("transformer.") for k in sd) else ""
    out["model.embed_tokens.weight"] = sd[f"{p}wte.weight"]
    out["model.positions.embeddings.weight"] = sd[f"{p}wpe.weight"]
    for i in range(num_layers):
        src, dst = f"{p}h.{i}.", f"model.layers.{i}."
        for a, b in (("ln_1", "attn_norm"), ("ln_2", "mlp_norm")):
            out[f"{dst}{b}.weight"] = sd[f"{src}{a}.weight"]
            out[f"{dst}{b}.bias"] = sd[f"{src}{a}.bias"]
        # c_attn's output columns are [q | k | v]: stacked as `qkv_proj`, the layout before hf_lm grouped
        # them by head, which `Attention` regroups into `query_key_value` when the state dict loads
        for a, b in (("attn.c_attn", "self_attn.qkv_proj"), ("attn.c_proj", "self_attn.o_proj"),
                     ("mlp.c_fc", "mlp.up_proj"), ("mlp.c_proj", "mlp.down_proj")):  # fmt: skip
            out[f"{dst}{b}.weight"] = sd[f"{src}{a}.weight"].t().contiguous()
            out[f"{dst}{b}.bias"] = sd[f"{src}{a}.bias"]
    out["model.norm.weight"] = sd[f"{p}ln_f.weight"]
    out["model.norm.bias"] = sd[f"{p}ln_f.bias"]
    if "lm_head.weight" in sd:
        out["lm_head.weight"] = sd["lm_head.weight"]
    if "score.weight" in sd:
        out["score.weight"] = sd["score.weight"]
    return out


def _llama_config(ref, **extra) -> HfLmGPTConfig:
    if ref.hidden_act not in _LLAMA_ACTS:
        raise ValueError(f"Llama hidden_act={ref.hidden_act!r} has no hf_lm equivalent.")
    rope = ref.rope_parameters or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"Only default RoPE converts, got rope_type={rope.get('rope_type')!r}.")
    if getattr(ref, "pretraining_tp", 1) not in (None, 1):
        raise ValueError("Llama checkpoints with pretraining_tp > 1 do not convert.")
    return HfLmGPTConfig(
        hidden_size=ref.hidden_size,
        num_hidden_layers=ref.num_hidden_layers,
        num_attention_heads=ref.num_attention_heads,
        num_key_value_heads=ref.num_key_value_heads,
        head_dim=ref.head_dim,
        intermediate_size=ref.intermediate_size,
        hidden_act=_LLAMA_ACTS[ref.hidden_act],
        position_embedding_type="rope",
        max_position_embeddings=ref.max_position_embeddings,
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        norm_type="rmsnorm",
        norm_position="pre",
        norm_eps=ref.rms_norm_eps,
        attention_bias=bool(getattr(ref, "attention_bias", False)),  # Mixtral has none
        mlp_bias=bool(getattr(ref, "mlp_bias", False)),
        hidden_dropout=0.0,
        attention_dropout=float(ref.attention_dropout or 0.0),
        initializer_range=ref.initializer_range,
        tie_word_embeddings=bool(ref.tie_word_embeddings),
        **_common_kwargs(ref),
        **extra,
    )


def _llama_state_dict(sd: dict, config, ref_config) -> dict:
    """Llama keeps q/k/v and gate/up as separate Linears; hf_lm stacks each group into one (q/k/v as
    `qkv_proj`, which `Attention` regroups by head into `query_key_value` at `load_state_dict`)."""
    num_layers = config.num_hidden_layers
    p = "model." if any(k.startswith("model.") for k in sd) else ""  # LlamaModel has no prefix
    out = {
        "model.embed_tokens.weight": sd[f"{p}embed_tokens.weight"],
        "model.norm.weight": sd[f"{p}norm.weight"],
    }
    for i in range(num_layers):
        src, dst = f"{p}layers.{i}.", f"model.layers.{i}."
        out[f"{dst}attn_norm.weight"] = sd[f"{src}input_layernorm.weight"]
        out[f"{dst}mlp_norm.weight"] = sd[f"{src}post_attention_layernorm.weight"]
        for suffix in ("weight", "bias"):
            qkv = [sd.get(f"{src}self_attn.{n}_proj.{suffix}") for n in "qkv"]
            if qkv[0] is not None:
                out[f"{dst}self_attn.qkv_proj.{suffix}"] = torch.cat(qkv, dim=0)
            for a, b in (("self_attn.o_proj", "self_attn.o_proj"), ("mlp.down_proj", "mlp.down_proj")):
                if f"{src}{a}.{suffix}" in sd:
                    out[f"{dst}{b}.{suffix}"] = sd[f"{src}{a}.{suffix}"]
            gate_up = [sd.get(f"{src}mlp.{n}_proj.{suffix}") for n in ("gate", "up")]
            if gate_up[0] is not None:
                out[f"{dst}mlp.gate_up_proj.{suffix}"] = torch.cat(gate_up, dim=0)
    for key in ("lm_head.weight", "score.weight"):
        if key in sd:
            out[key] = sd[key]
    return out


def _sliding_window(ref) -> dict:
    """Mistral's and Mixtral's `sliding_window` (each query sees that many latest keys, itself
    included), which hf_lm's GPT config takes under the same name: a band of reach window - 1.

    hf_lm counts the band over real tokens, so a left-padded row sees the window it has alone;
    transformers counts positions, padding included: on left-padded rows longer than the window the
    two differ, on unpadded ones they agree."""
    window = getattr(ref, "sliding_window", None)
    if window is None or getattr(ref, "use_sliding_window", True) is False:
        return {}
    if getattr(ref, "layer_types", None) and set(ref.layer_types) != {"sliding_attention"}:
        raise ValueError(
            f"Checkpoints whose layers mix sliding and full attention (layer_types={sorted(set(ref.layer_types))}) "
            "do not convert: hf_lm's attention_pattern is the same in every layer."
        )
    if window < 2:
        raise ValueError(f"sliding_window={window} does not convert: hf_lm's window holds at least 2 keys.")
    return {"sliding_window": window}


def _mistral_config(ref) -> HfLmGPTConfig:
    """Mistral: Llama's decoder with a sliding window of `sliding_window` keys."""
    return _llama_config(ref, **_sliding_window(ref))


def _mixtral_config(ref) -> HfLmGPTConfig:
    """Mixtral: Llama's decoder with a top-k mixture of SwiGLU experts in every layer (and Mistral's
    sliding window when the checkpoint has one)."""
    return _llama_config(
        ref,
        **_sliding_window(ref),
        num_local_experts=ref.num_local_experts,
        num_experts_per_tok=ref.num_experts_per_tok,
        norm_topk_prob=True,  # Mixtral renormalizes the k chosen probabilities
        router_jitter_noise=float(ref.router_jitter_noise),
        router_aux_loss_coef=float(ref.router_aux_loss_coef),
        output_router_logits=bool(ref.output_router_logits),
    )


def _mixtral_state_dict(sd: dict, config, ref_config) -> dict:
    """Llama's keys, plus the router (`mlp.gate`) and the experts, which Mixtral stores as (E, ...)
    tensors: `gate_up_proj` (E, 2ff, C) has the gate rows first, as hf_lm's `GatedMLP` does."""
    out = _llama_state_dict(sd, config, ref_config)
    p = "model." if any(k.startswith("model.") for k in sd) else ""
    for i in range(config.num_hidden_layers):
        src, dst = f"{p}layers.{i}.mlp.", f"model.layers.{i}.mlp."
        out[f"{dst}gate.weight"] = sd[f"{src}gate.weight"]
        for e in range(config.num_local_experts):
            out[f"{dst}experts.{e}.gate_up_proj.weight"] = sd[f"{src}experts.gate_up_proj"][e]
            out[f"{dst}experts.{e}.down_proj.weight"] = sd[f"{src}experts.down_proj"][e]
    return out


def _bert_config(ref, config_class=HfLmBertConfig, **extra) -> HfLmBertConfig:
    """BERT and RoBERTa: the same post-norm encoder; RoBERTa's positions start after its padding id.
    ELECTRA's encoder is BERT's too: `config_class` and `extra` fields say what it adds."""
    if ref.hidden_act not in _BERT_ACTS:
        raise ValueError(f"{ref.model_type} hidden_act={ref.hidden_act!r} has no hf_lm equivalent.")
    if getattr(ref, "position_embedding_type", "absolute") not in (None, "absolute"):
        raise ValueError("Only absolute position embeddings convert (position_embedding_type='absolute').")
    if getattr(ref, "is_decoder", False) or getattr(ref, "add_cross_attention", False):
        raise ValueError("Only encoder BERT/RoBERTa converts (is_decoder=False, add_cross_attention=False).")
    positions = ref.max_position_embeddings
    if ref.model_type == "roberta":
        # RoBERTa numbers real tokens from padding_idx + 1; the rows below are never used by text
        positions -= ref.pad_token_id + 1
    return config_class(
        hidden_size=ref.hidden_size,
        num_hidden_layers=ref.num_hidden_layers,
        num_attention_heads=ref.num_attention_heads,
        intermediate_size=ref.intermediate_size,
        hidden_act=_BERT_ACTS[ref.hidden_act],
        position_embedding_type="learned",
        max_position_embeddings=positions,
        type_vocab_size=ref.type_vocab_size,
        norm_type="layernorm",
        norm_position="post",
        norm_eps=ref.layer_norm_eps,
        attention_bias=True,
        mlp_bias=True,
        hidden_dropout=float(ref.hidden_dropout_prob),
        attention_dropout=float(ref.attention_probs_dropout_prob),
        classifier_dropout=getattr(ref, "classifier_dropout", None),
        initializer_range=ref.initializer_range,
        tie_word_embeddings=bool(getattr(ref, "tie_word_embeddings", True)),
        **_common_kwargs(ref),
        **extra,
    )


def _bert_state_dict(sd: dict, config, ref_config) -> dict:
    """Rename BERT/RoBERTa weights; q, k and v are stacked into one `qkv_proj` (regrouped by head into
    `query_key_value` when the state dict loads)."""
    num_layers, model_type, pad_token_id = (
        config.num_hidden_layers,
        ref_config.model_type,
        ref_config.pad_token_id or 0,
    )
    prefix = next((p for p in ("bert.", "roberta.", "electra.") if any(k.startswith(p) for k in sd)), "")
    out = {}
    emb = f"{prefix}embeddings."
    out["model.embed_tokens.weight"] = sd[f"{emb}word_embeddings.weight"]
    positions = sd[f"{emb}position_embeddings.weight"]
    if model_type == "roberta":
        positions = positions[pad_token_id + 1 :]
    out["model.positions.embeddings.weight"] = positions
    if f"{emb}token_type_embeddings.weight" in sd:
        out["model.token_type_embeddings.weight"] = sd[f"{emb}token_type_embeddings.weight"]
    out["model.embed_norm.weight"] = sd[f"{emb}LayerNorm.weight"]
    out["model.embed_norm.bias"] = sd[f"{emb}LayerNorm.bias"]
    for i in range(num_layers):
        src, dst = f"{prefix}encoder.layer.{i}.", f"model.layers.{i}."
        for suffix in ("weight", "bias"):
            out[f"{dst}self_attn.qkv_proj.{suffix}"] = torch.cat(
                [sd[f"{src}attention.self.{n}.{suffix}"] for n in ("query", "key", "value")], dim=0
            )
            for a, b in (
                ("attention.output.dense", "self_attn.o_proj"),
                ("attention.output.LayerNorm", "attn_norm"),  # post-norm: after the attention residual
                ("intermediate.dense", "mlp.up_proj"),
                ("output.dense", "mlp.down_proj"),
                ("output.LayerNorm", "mlp_norm"),
            ):
                out[f"{dst}{b}.{suffix}"] = sd[f"{src}{a}.{suffix}"]
    if f"{prefix}pooler.dense.weight" in sd:
        out["model.pooler.0.weight"] = sd[f"{prefix}pooler.dense.weight"]
        out["model.pooler.0.bias"] = sd[f"{prefix}pooler.dense.bias"]
    # masked-LM head: BERT's `cls.predictions.transform.*`, RoBERTa's `lm_head.*`
    for head, dense, norm, bias in (
        ("cls.predictions.", "transform.dense", "transform.LayerNorm", "bias"),
        ("lm_head.", "dense", "layer_norm", "bias"),
    ):
        if f"{head}{dense}.weight" in sd:
            for suffix in ("weight", "bias"):
                out[f"lm_head.dense.{suffix}"] = sd[f"{head}{dense}.{suffix}"]
                out[f"lm_head.norm.{suffix}"] = sd[f"{head}{norm}.{suffix}"]
            out["lm_head.decoder.weight"] = sd[f"{head}decoder.weight"]
            out["lm_head.decoder.bias"] = sd.get(f"{head}decoder.bias", sd.get(f"{head}{bias}"))
    for a, b in (("cls.seq_relationship", "sentence_head"), ("classifier", "classifier")):
        if f"{a}.weight" in sd:
            out[f"{b}.weight"] = sd[f"{a}.weight"]
            out[f"{b}.bias"] = sd[f"{a}.bias"]
    return out


def _electra_config(ref) -> HfLmElectraConfig:
    """ELECTRA: BERT's encoder with E-wide embeddings projected to the hidden size when E != C."""
    return _bert_config(ref, HfLmElectraConfig, embedding_size=ref.embedding_size)


def _electra_state_dict(sd: dict, config, ref_config) -> dict:
    """BERT's renaming for the encoder, then ELECTRA's projection and heads: the discriminator's
    `discriminator_predictions`, the generator's `generator_predictions` + `generator_lm_head`, the
    sentence classifier's `classifier.dense`/`classifier.out_proj`."""
    if "generator_lm_head.weight" in sd and config.hidden_act != "gelu":
        # transformers' generator head is GELU whatever hidden_act says; hf_lm's follows hidden_act
        raise ValueError(f"ElectraForMaskedLM converts with hidden_act='gelu', got {config.hidden_act!r}.")
    out = _bert_state_dict(sd, config, ref_config)
    prefix = "electra." if any(k.startswith("electra.") for k in sd) else ""
    renames = {
        f"{prefix}embeddings_project": "model.embed_proj",
        "discriminator_predictions.dense": "discriminator_head.dense",
        "discriminator_predictions.dense_prediction": "discriminator_head.dense_prediction",
        "generator_predictions.dense": "lm_head.dense",
        "generator_predictions.LayerNorm": "lm_head.norm",
        "generator_lm_head": "lm_head.decoder",
        "classifier.dense": "dense",
        "classifier.out_proj": "classifier",
    }
    for a, b in renames.items():
        for suffix in ("weight", "bias"):
            if f"{a}.{suffix}" in sd:
                out[f"{b}.{suffix}"] = sd[f"{a}.{suffix}"]
    return out


_T5_ACTS = {"relu": "relu", "gated-gelu": "geglu_tanh", "gated-relu": "reglu", "gated-silu": "swiglu"}


def _t5_config(ref, **extra) -> HfLmT5Config:
    """T5 v1.0 (ReLU, tied and rescaled head) and v1.1 (gated-GELU, untied head); `extra`: the fields
    of a model built on T5 (SwitchTransformers, whose feed-forwards are ReLU, with no such field)."""
    feed_forward_proj = getattr(ref, "feed_forward_proj", "relu")
    if feed_forward_proj not in _T5_ACTS:
        raise ValueError(f"T5 feed_forward_proj={feed_forward_proj!r} has no hf_lm equivalent.")
    tied = bool(ref.tie_word_embeddings)
    # transformers 5 keeps T5's head tied and records v1.0's output rescaling separately
    scale = bool(getattr(ref, "scale_decoder_outputs", tied))
    return HfLmT5Config(
        hidden_size=ref.d_model,
        head_dim=ref.d_kv,
        num_hidden_layers=ref.num_layers,
        decoder_layers=ref.num_decoder_layers,
        num_attention_heads=ref.num_heads,
        intermediate_size=ref.d_ff,
        hidden_act=_T5_ACTS[feed_forward_proj],
        relative_attention_num_buckets=ref.relative_attention_num_buckets,
        relative_attention_max_distance=ref.relative_attention_max_distance,
        norm_eps=ref.layer_norm_epsilon,
        hidden_dropout=float(ref.dropout_rate),
        attention_dropout=0.0,
        tie_word_embeddings=tied,
        scale_decoder_output=scale,  # v1.0 rescales the decoder output before the head, v1.1 does not
        decoder_start_token_id=ref.decoder_start_token_id,
        **_common_kwargs(ref),
        **extra,
    )


def _t5_state_dict(sd: dict, config, ref_config) -> dict:
    out = {"model.embed_tokens.weight": sd["shared.weight"]}
    gated = config.hidden_act != "relu"
    for stack, n_layers in (("encoder", config.num_hidden_layers), ("decoder", config.decoder_layers)):
        out[f"model.{stack}.norm.weight"] = sd[f"{stack}.final_layer_norm.weight"]
        out[f"model.{stack}.positions.bias.weight"] = sd[
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        ]
        for i in range(n_layers):
            src, dst = f"{stack}.block.{i}.layer.", f"model.{stack}.layers.{i}."
            att = f"{src}0.SelfAttention."
            out[f"{dst}self_attn.qkv_proj.weight"] = torch.cat([sd[f"{att}{n}.weight"] for n in "qkv"], dim=0)
            out[f"{dst}self_attn.o_proj.weight"] = sd[f"{att}o.weight"]
            out[f"{dst}attn_norm.weight"] = sd[f"{src}0.layer_norm.weight"]
            ff = 1
            if stack == "decoder":  # layer 1 is the cross-attention, layer 2 the feed-forward
                cross = f"{src}1.EncDecAttention."
                out[f"{dst}cross_attn.q_proj.weight"] = sd[f"{cross}q.weight"]
                out[f"{dst}cross_attn.kv_proj.weight"] = torch.cat(
                    [sd[f"{cross}k.weight"], sd[f"{cross}v.weight"]]
                )
                out[f"{dst}cross_attn.o_proj.weight"] = sd[f"{cross}o.weight"]
                out[f"{dst}cross_attn_norm.weight"] = sd[f"{src}1.layer_norm.weight"]
                ff = 2
            dense = f"{src}{ff}.DenseReluDense."
            if gated:  # wi_0 is the gated branch, wi_1 the linear one
                out[f"{dst}mlp.gate_up_proj.weight"] = torch.cat(
                    [sd[f"{dense}wi_0.weight"], sd[f"{dense}wi_1.weight"]]
                )
            else:
                out[f"{dst}mlp.up_proj.weight"] = sd[f"{dense}wi.weight"]
            out[f"{dst}mlp.down_proj.weight"] = sd[f"{dense}wo.weight"]
            out[f"{dst}mlp_norm.weight"] = sd[f"{src}{ff}.layer_norm.weight"]
    if "lm_head.weight" in sd:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def _switch_config(ref) -> HfLmT5Config:
    """SwitchTransformers: T5 v1.0 whose sparse layers have a Switch top-1 mixture of ReLU experts."""
    if ref.router_bias or ref.router_dtype != "float32" or ref.dense_act_fn != "relu":
        raise ValueError(
            "Only Switch checkpoints with router_bias=False, router_dtype='float32' and dense_act_fn='relu' convert."
        )
    if min(ref.encoder_sparse_step, ref.decoder_sparse_step) < 1:
        raise ValueError(
            "Only Switch checkpoints with sparse layers in both stacks (sparse steps >= 1) convert."
        )
    return _t5_config(
        ref,
        num_local_experts=ref.num_experts,
        num_experts_per_tok=1,
        norm_topk_prob=False,  # Switch weights the expert by its router probability
        expert_capacity=ref.expert_capacity,
        router_jitter_noise=float(ref.router_jitter_noise),
        router_aux_loss_coef=float(ref.router_aux_loss_coef),
        router_z_loss_coef=float(ref.router_z_loss_coef),
        encoder_sparse_step=ref.encoder_sparse_step,
        decoder_sparse_step=ref.decoder_sparse_step,
    )


def _switch_state_dict(sd: dict, config, ref_config) -> dict:
    """T5's keys (Switch's dense feed-forward is `mlp.wi`/`mlp.wo`, T5's `DenseReluDense`), and in the
    sparse layers the router (`mlp.router.classifier` -> `mlp.gate`) and the experts."""
    t5_sd, sparse = dict(sd), []
    for stack, n_layers in (("encoder", config.num_hidden_layers), ("decoder", config.decoder_layers)):
        ff = 2 if stack == "decoder" else 1
        for i in range(n_layers):
            src = f"{stack}.block.{i}.layer.{ff}."
            if f"{src}mlp.router.classifier.weight" in sd:
                sparse.append((src, f"model.{stack}.layers.{i}.mlp."))
                expert = f"{src}mlp.experts.expert_0."  # a stand-in the T5 conversion copies, removed below
                t5_sd[f"{src}DenseReluDense.wi.weight"] = sd[f"{expert}wi.weight"]
                t5_sd[f"{src}DenseReluDense.wo.weight"] = sd[f"{expert}wo.weight"]
            else:
                t5_sd[f"{src}DenseReluDense.wi.weight"] = sd[f"{src}mlp.wi.weight"]
                t5_sd[f"{src}DenseReluDense.wo.weight"] = sd[f"{src}mlp.wo.weight"]
    out = _t5_state_dict(t5_sd, config, ref_config)
    for src, dst in sparse:
        del out[f"{dst}up_proj.weight"], out[f"{dst}down_proj.weight"]
        out[f"{dst}gate.weight"] = sd[f"{src}mlp.router.classifier.weight"]
        for e in range(config.num_local_experts):
            out[f"{dst}experts.{e}.up_proj.weight"] = sd[f"{src}mlp.experts.expert_{e}.wi.weight"]
            out[f"{dst}experts.{e}.down_proj.weight"] = sd[f"{src}mlp.experts.expert_{e}.wo.weight"]
    return out


_BART_ACTS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def _bart_config(ref) -> HfLmBartConfig:
    if ref.activation_function not in _BART_ACTS:
        raise ValueError(f"BART activation_function={ref.activation_function!r} has no hf_lm equivalent.")
    if (ref.encoder_attention_heads, ref.encoder_ffn_dim) != (
        ref.decoder_attention_heads,
        ref.decoder_ffn_dim,
    ):
        raise ValueError(
            "Only BART configs with the same heads and feed-forward width in both stacks convert."
        )
    return HfLmBartConfig(
        hidden_size=ref.d_model,
        num_hidden_layers=ref.encoder_layers,
        decoder_layers=ref.decoder_layers,
        num_attention_heads=ref.encoder_attention_heads,
        intermediate_size=ref.encoder_ffn_dim,
        hidden_act=_BART_ACTS[ref.activation_function],
        max_position_embeddings=ref.max_position_embeddings,
        scale_embedding=bool(ref.scale_embedding),
        hidden_dropout=float(ref.dropout),
        attention_dropout=float(ref.attention_dropout),
        initializer_range=ref.init_std,
        tie_word_embeddings=bool(getattr(ref, "tie_word_embeddings", True)),
        decoder_start_token_id=ref.decoder_start_token_id,
        **_common_kwargs(ref),
    )


def _bart_state_dict(sd: dict, config, ref_config) -> dict:
    """BART: separate q/k/v Linears (stacked here); positions offset by 2 rows (dropped)."""
    bias = sd.get("final_logits_bias")
    if bias is not None and bool(bias.any()):
        raise ValueError(
            "BART checkpoints with a non-zero final_logits_bias do not convert (hf_lm has no such bias)."
        )
    p = "model." if any(k.startswith("model.") for k in sd) else ""
    # the stacks read their own `embed_tokens`; tied (the default) they are `shared`. Untied
    # (tie_word_embeddings=False) transformers keeps four matrices: `shared` unused, one per stack and
    # the head. hf_lm's stacks share one embedding, so theirs must be equal; the head stays its own.
    embed = sd.get(f"{p}encoder.embed_tokens.weight", sd[f"{p}shared.weight"])
    decoder_embed = sd.get(f"{p}decoder.embed_tokens.weight", embed)
    if decoder_embed.shape != embed.shape or not torch.equal(decoder_embed, embed):
        raise ValueError(
            "This BART's encoder and decoder token embeddings differ (tie_word_embeddings=False keeps them "
            "apart): hf_lm's BART shares one embedding between its stacks, so it cannot hold this checkpoint."
        )
    out = {"model.embed_tokens.weight": embed}
    for stack, n_layers in (("encoder", config.num_hidden_layers), ("decoder", config.decoder_layers)):
        out[f"model.{stack}.positions.embeddings.weight"] = sd[f"{p}{stack}.embed_positions.weight"][2:]
        for suffix in ("weight", "bias"):
            out[f"model.{stack}.embed_norm.{suffix}"] = sd[f"{p}{stack}.layernorm_embedding.{suffix}"]
        for i in range(n_layers):
            src, dst = f"{p}{stack}.layers.{i}.", f"model.{stack}.layers.{i}."
            for suffix in ("weight", "bias"):
                out[f"{dst}self_attn.qkv_proj.{suffix}"] = torch.cat(
                    [sd[f"{src}self_attn.{n}_proj.{suffix}"] for n in "qkv"]
                )
                pairs = [
                    ("self_attn.out_proj", "self_attn.o_proj"),
                    ("self_attn_layer_norm", "attn_norm"),
                    ("fc1", "mlp.up_proj"),
                    ("fc2", "mlp.down_proj"),
                    ("final_layer_norm", "mlp_norm"),
                ]
                if stack == "decoder":
                    out[f"{dst}cross_attn.kv_proj.{suffix}"] = torch.cat(
                        [sd[f"{src}encoder_attn.k_proj.{suffix}"], sd[f"{src}encoder_attn.v_proj.{suffix}"]]
                    )
                    pairs += [
                        ("encoder_attn.q_proj", "cross_attn.q_proj"),
                        ("encoder_attn.out_proj", "cross_attn.o_proj"),
                        ("encoder_attn_layer_norm", "cross_attn_norm"),
                    ]
                for a, b in pairs:
                    out[f"{dst}{b}.{suffix}"] = sd[f"{src}{a}.{suffix}"]
    if "lm_head.weight" in sd:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


# transformers model_type -> (config converter, state-dict converter). Which hf_lm family each
# model type converts into is the family table's `convert_from`; which head, the Auto class the
# reference class is registered under (GPT2LMHeadModel: AutoModelForCausalLM -> HfLmGPTForCausalLM).
_CONVERTERS = {
    "gpt2": (_gpt2_config, _gpt2_state_dict),
    "llama": (_llama_config, _llama_state_dict),
    "mistral": (_mistral_config, _llama_state_dict),
    "mixtral": (_mixtral_config, _mixtral_state_dict),
    "bert": (_bert_config, _bert_state_dict),
    "roberta": (_bert_config, _bert_state_dict),
    "electra": (_electra_config, _electra_state_dict),
    "t5": (_t5_config, _t5_state_dict),
    "switch_transformers": (_switch_config, _switch_state_dict),
    "bart": (_bart_config, _bart_state_dict),
}

# the reference classes each model type converts from (RoBERTa's classifier has another head shape)
_SUPPORTED = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Model", "GPT2ForSequenceClassification"),
    "llama": ("LlamaForCausalLM", "LlamaModel", "LlamaForSequenceClassification"),
    "mistral": ("MistralForCausalLM", "MistralModel", "MistralForSequenceClassification"),
    "mixtral": ("MixtralForCausalLM", "MixtralModel"),
    "bert": ("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"),
    "roberta": ("RobertaModel", "RobertaForMaskedLM"),
    "electra": (
        "ElectraModel",
        "ElectraForPreTraining",
        "ElectraForMaskedLM",
        "ElectraForSequenceClassification",
        "ElectraForTokenClassification",
    ),
    "t5": ("T5ForConditionalGeneration", "T5Model"),
    "switch_transformers": ("SwitchTransformersForConditionalGeneration", "SwitchTransformersModel"),
    "bart": ("BartForConditionalGeneration", "BartModel"),
}


def _hf_lm_head(model: torch.nn.Module) -> type:
    """The hf_lm class of a reference model: the head its family registers under the reference's Auto class."""
    family = next(f for f in FAMILIES.values() if model.config.model_type in f.convert_from)
    for auto_class, head in family.heads.items():
        # the reference class transformers registers under this Auto class for the reference's config
        reference = auto_class._model_mapping.get(type(model.config), None)
        if type(model) in (reference if isinstance(reference, (list, tuple)) else (reference,)):
            return head
    raise ValueError(f"{type(model).__name__} maps to no head of the hf_lm family {family.name!r}.")


def from_transformers(model: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Return the hf_lm model equivalent to a transformers reference model.

    Supported: `GPT2LMHeadModel`, `GPT2Model`, `GPT2ForSequenceClassification`, `LlamaForCausalLM`,
    `LlamaModel`, `LlamaForSequenceClassification`, `MistralForCausalLM`, `MistralModel`,
    `MistralForSequenceClassification` (its `sliding_window` becomes hf_lm's), `BertModel`, `BertForMaskedLM`,
    `BertForPreTraining`, `BertForSequenceClassification`, `RobertaModel`, `RobertaForMaskedLM`,
    `ElectraModel`, `ElectraForPreTraining` (the discriminator), `ElectraForMaskedLM` (the generator),
    `ElectraForSequenceClassification`, `ElectraForTokenClassification`,
    `T5ForConditionalGeneration` / `T5Model` (v1.0 ReLU and v1.1 gated-GELU), the mixtures of
    experts `MixtralForCausalLM` / `MixtralModel` (into the GPT family) and
    `SwitchTransformersForConditionalGeneration` / `SwitchTransformersModel` (into T5), and
    `BartForConditionalGeneration` / `BartModel`.
    The result has the reference's dtype (or `dtype`), is in eval mode, and produces the same hidden
    states and logits (RoBERTa: on real tokens; its padding positions use a row hf_lm drops).

    Raises:
        ValueError: for an unsupported model class or a configuration hf_lm cannot represent.
    """
    ref_config = model.config
    model_type = ref_config.model_type
    name = type(model).__name__
    if model_type not in _CONVERTERS or name not in _SUPPORTED[model_type]:
        supported = ", ".join(n for names in _SUPPORTED.values() for n in names)
        raise ValueError(
            f"from_transformers does not support {name} (model_type={model_type!r}); supported: {supported}."
        )
    make_config, convert_state_dict = _CONVERTERS[model_type]
    head = _hf_lm_head(model)
    config = make_config(ref_config)
    state_dict = convert_state_dict(model.state_dict(), config, ref_config)
    if head.base_model_prefix and head.__name__.endswith("Model"):
        state_dict = {k.removeprefix("model."): v for k, v in state_dict.items() if k.startswith("model.")}
    ref_dtype = next(model.parameters()).dtype
    new = head(config)
    tied = set(new._tied_weights_keys or {}) if config.tie_word_embeddings else set()
    for key in tied:
        state_dict.pop(key, None)  # tied: the embedding is the head
    missing, unexpected = new.load_state_dict(state_dict, strict=False)
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise ValueError(f"Weight conversion of {name} failed: missing {missing}, unexpected {unexpected}.")
    new.config._attn_implementation = ref_config._attn_implementation or "sdpa"
    if getattr(model, "generation_config", None) is not None and hasattr(new, "generation_config"):
        # the same generation defaults (e.g. BART's forced_eos_token_id), so generate() agrees too
        new.generation_config = copy.deepcopy(model.generation_config)
    logger.info("Converted %s to %s (%d parameters).", name, type(new).__name__, new.num_parameters())
    return new.to(dtype or ref_dtype).eval()
