"""The model pairs the benchmarks measure, and their inputs: a transformers reference built from a
seed, and hf_lm's model converted from it (`hf_lm.convert.from_transformers`), so that both sides
compute the same function with the same weights.

- GPT-2- or Llama-shaped decoders (`bench_gpt`, `bench_gpu`, the suite's compile phase):
  `gpt_reference_config`, `build_gpt_reference`, `build_gpt_hflm`, `random_ids`.
- BERT masked LMs (`bench_bert`, `bench_gpu`): `bert_reference_config`, `build_bert_reference`,
  `build_bert_hflm` (dense or sparse prediction), `mlm_batch`.
- T5 and BART (`bench_seq2seq`, `bench_gpu`): `seq2seq_reference_config`,
  `build_seq2seq_reference`, `build_seq2seq_hflm`, `seq2seq_train_batch`.

Each builder reads the sizes from an `args` namespace (a script's parsed flags, or bench_gpu's
`SimpleNamespace`): `vocab`, `hidden`, `layers`, `heads`, `intermediate`, `seed` and the family's own.
"""

from __future__ import annotations

import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM, HfLmGPTForCausalLM
from hf_lm.convert import from_transformers

# BERT's uncased WordPiece ids; real word pieces start at 1000 in that vocabulary
PAD_ID, CLS_ID, SEP_ID, MASK_ID, FIRST_WORD_ID = 0, 101, 102, 103, 1000
# below: T5's pad/eos/unk, BART's bos/pad/eos; random ids never hit them
SEQ2SEQ_FIRST_WORD_ID = 3


def random_ids(batch: int, seq: int, vocab: int, seed: int, low: int = 0) -> torch.Tensor:
    """(batch, seq) token ids uniform in [low, vocab), from their own generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, (batch, seq), generator=g)


# --------------------------------------------------------------------------------------------
# GPT-2 and Llama
# --------------------------------------------------------------------------------------------


def gpt_reference_config(args) -> GPT2Config | LlamaConfig:
    if args.family == "llama":
        return LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads,
            intermediate_size=args.intermediate,
            hidden_act="silu",  # SwiGLU
            max_position_embeddings=args.context,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5,
            attention_bias=False,
            mlp_bias=False,
            attention_dropout=0.0,
            tie_word_embeddings=False,
            pad_token_id=None,
            bos_token_id=None,  # Llama's defaults (1, 2) would be real tokens of this random vocabulary
            eos_token_id=None,
        )
    return GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.context,
        n_embd=args.hidden,
        n_layer=args.layers,
        n_head=args.heads,
        n_inner=args.intermediate,
        activation_function="gelu_new",  # GPT-2's own tanh-GELU
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=None,  # GPT-2's defaults (50256) lie outside this vocabulary
        eos_token_id=None,
    )


def build_gpt_reference(args) -> GPT2LMHeadModel | LlamaForCausalLM:
    torch.manual_seed(args.seed)
    cls = LlamaForCausalLM if args.family == "llama" else GPT2LMHeadModel
    model = cls._from_config(gpt_reference_config(args), attn_implementation="sdpa")
    model.loss_type = "ForCausalLM"  # what it falls back to anyway, minus a warning
    return model


def build_gpt_hflm(args) -> HfLmGPTForCausalLM:
    """hf_lm's GPT computing the reference's function: the reference converted by `from_transformers`."""
    model = from_transformers(build_gpt_reference(args))
    model.config._attn_implementation = "sdpa"
    return model.train()


# --------------------------------------------------------------------------------------------
# BERT
# --------------------------------------------------------------------------------------------


def bert_reference_config(args, dropout: float | None = None) -> BertConfig:
    dropout = args.dropout if dropout is None else dropout
    return BertConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=args.max_positions,
        type_vocab_size=2,
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        layer_norm_eps=1e-12,
        pad_token_id=PAD_ID,
        tie_word_embeddings=True,
    )


def build_bert_reference(args, dropout: float | None = None) -> BertForMaskedLM:
    torch.manual_seed(args.seed)
    model = BertForMaskedLM._from_config(bert_reference_config(args, dropout), attn_implementation="sdpa")
    return model.train()


def build_bert_hflm(args, sparse: bool, dropout: float | None = None) -> HfLmBertForMaskedLM:
    """hf_lm's BERT computing the reference's function: the reference converted by `from_transformers`,
    then (for the sparse side) the same weights in a model whose config has `sparse_prediction=True`."""
    converted = from_transformers(build_bert_reference(args, dropout))
    config = HfLmBertConfig.from_dict({**converted.config.to_dict(), "sparse_prediction": sparse})
    model = HfLmBertForMaskedLM._from_config(config, attn_implementation="sdpa")
    model.load_state_dict(converted.state_dict())
    assert model.lm_head.decoder.weight is model.model.embed_tokens.weight  # still tied
    return model.train()


def mlm_batch(args, seed: int) -> dict[str, torch.Tensor]:
    """A right-padded masked-LM batch as BERT's collator makes it (`bench_bert`'s docstring says how)."""
    B, T = args.batch, args.seq
    g = torch.Generator().manual_seed(seed)
    lengths = torch.full((B,), T)
    n_padded = round(B * args.pad_fraction)
    if n_padded:
        # the padded rows are spread over the batch, with lengths uniform in [T/2, T)
        rows = torch.randperm(B, generator=g)[:n_padded]
        lengths[rows] = torch.randint(T // 2, T, (n_padded,), generator=g)
    pos = torch.arange(T)[None]  # (1, T)
    attention_mask = (pos < lengths[:, None]).long()  # (B, T)
    words = torch.randint(FIRST_WORD_ID, args.vocab, (B, T), generator=g)
    ids = torch.where(attention_mask.bool(), words, PAD_ID)
    ids[:, 0] = CLS_ID
    ids[torch.arange(B), lengths - 1] = SEP_ID
    maskable = attention_mask.bool() & (pos > 0) & (pos < (lengths - 1)[:, None])  # real, not special
    selected = maskable & (torch.rand(B, T, generator=g) < args.mask_prob)
    labels = torch.where(selected, ids, -100)
    u = torch.rand(B, T, generator=g)
    random_words = torch.randint(FIRST_WORD_ID, args.vocab, (B, T), generator=g)
    input_ids = torch.where(selected & (u < 0.8), MASK_ID, ids)  # 80% [MASK]
    input_ids = torch.where(selected & (u >= 0.8) & (u < 0.9), random_words, input_ids)  # 10% random
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


# --------------------------------------------------------------------------------------------
# T5 and BART
# --------------------------------------------------------------------------------------------


def seq2seq_reference_config(family: str, args):
    if family == "t5":
        return T5Config(
            vocab_size=args.vocab,
            d_model=args.hidden,
            d_kv=args.hidden // args.heads,
            d_ff=args.intermediate,
            num_layers=args.layers,
            num_decoder_layers=args.layers,
            num_heads=args.heads,
            relative_attention_num_buckets=32,
            relative_attention_max_distance=128,
            feed_forward_proj="relu",  # T5 v1.0
            dropout_rate=0.0,
            layer_norm_epsilon=1e-6,
            tie_word_embeddings=True,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        )
    return BartConfig(
        vocab_size=args.vocab,
        d_model=args.hidden,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.intermediate,
        decoder_ffn_dim=args.intermediate,
        max_position_embeddings=args.max_positions,
        activation_function="gelu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=False,
        tie_word_embeddings=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
    )


def build_seq2seq_reference(family: str, args) -> torch.nn.Module:
    torch.manual_seed(args.seed)
    cls = T5ForConditionalGeneration if family == "t5" else BartForConditionalGeneration
    model = cls._from_config(seq2seq_reference_config(family, args), attn_implementation="sdpa")
    # see the module docstring: min_new_tokens == max_new_tokens and a forced EOS contradict
    model.generation_config.forced_eos_token_id = None
    return model.train()


def build_seq2seq_hflm(family: str, args) -> torch.nn.Module:
    """hf_lm's model computing the reference's function: the reference converted by `from_transformers`
    (which also copies its generation config)."""
    model = from_transformers(build_seq2seq_reference(family, args))
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    return model.train()


def seq2seq_train_batch(args, seed: int) -> dict[str, torch.Tensor]:
    source = random_ids(args.batch, args.source_len, args.vocab, seed, low=SEQ2SEQ_FIRST_WORD_ID)
    return {
        "input_ids": source,
        "attention_mask": torch.ones_like(source),  # what a tokenizer returns for unpadded rows
        "labels": random_ids(args.batch, args.target_len, args.vocab, seed + 1, low=SEQ2SEQ_FIRST_WORD_ID),
    }
