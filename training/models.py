"""The model a run trains: its family (`--family`), and a fresh model of it sized by the arguments.

`--family` names the model family (the names of `hf_lm.families.FAMILIES`); `--objective` chooses what
it is trained on, and each family trains only its objectives (`FAMILY_OBJECTIVES`). The older
spelling `--arch transformer` means the objective's Transformer family (`TRANSFORMER_FAMILIES`: GPT
for clm, BERT for mlm, T5 for span corruption, BART for BART denoising); `--arch rnn` and the other
pre-Transformer archs are the family of that name. Both spellings keep working.
"""

from __future__ import annotations

import torch

from hf_lm.families import FAMILIES

FAMILY_NAMES = tuple(FAMILIES)
DENOISING = ("span_corruption", "bart_denoising")
# the objectives each family is trained on
FAMILY_OBJECTIVES: dict[str, tuple[str, ...]] = {
    "gpt": ("clm",),
    "bert": ("mlm",),
    "electra": ("electra",),
    "t5": ("span_corruption",),
    "bart": ("bart_denoising",),
    "rnn": ("clm",),
    "rnn_seq2seq": DENOISING,
    "ffnn": ("clm",),
    "ngram": ("clm",),
}
# what the old `--arch transformer` means for each objective
TRANSFORMER_FAMILIES = {
    "clm": "gpt",
    "mlm": "bert",
    "electra": "electra",
    "span_corruption": "t5",
    "bart_denoising": "bart",
}
TRANSFORMERS = tuple(TRANSFORMER_FAMILIES.values())
RECURRENT = ("rnn", "rnn_seq2seq")


def resolve_family(arch: str, family: str | None, objective: str) -> str:
    """The family a run trains, from `--family` (or the older `--arch`) and `--objective`.

    Raises:
        ValueError: the family does not train the objective, or `--arch` names another family.
    """
    if family is None:
        family = TRANSFORMER_FAMILIES[objective] if arch == "transformer" else arch
    elif arch not in ("transformer", family):  # "transformer", the default, defers to --family
        raise ValueError(
            f"`arch`={arch!r} and `family`={family!r} name different families: give only --family."
        )
    if objective not in FAMILY_OBJECTIVES[family]:
        fitting = [name for name, objectives in FAMILY_OBJECTIVES.items() if objective in objectives]
        raise ValueError(
            f"family {family!r} is not trained with objective {objective!r}: it trains "
            f"{' or '.join(map(repr, FAMILY_OBJECTIVES[family]))}, and objective {objective!r} trains the families "
            f"{', '.join(fitting)}. Pass a matching --family and --objective."
        )
    return family


def check_preset(family: str, preset: str | None) -> None:
    """Raise `ValueError` naming `preset` when it is not one of `family`'s presets (None passes)."""
    presets = FAMILIES[family].presets
    if preset is not None and preset not in presets:
        choices = f"choose one of {list(presets)}" if presets else "it has none: leave --preset unset"
        raise ValueError(f"`preset` {preset!r} is not a preset of family {family!r}: {choices}.")


def _transformer_sizes(model_args, data_args, tokenizer, family: str) -> dict:
    """The shared size arguments of the Transformer families; GPT and BERT also take their variants
    (`ModelArguments.variants`: with --preset, only the variant flags given)."""
    variants = model_args.variants()
    sizes = dict(
        vocab_size=len(tokenizer),
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_hidden_layers,
        num_attention_heads=model_args.num_attention_heads,
        num_key_value_heads=model_args.num_key_value_heads,
        intermediate_size=model_args.intermediate_size,
        hidden_dropout=model_args.hidden_dropout,
        attention_dropout=model_args.attention_dropout,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    if "tie_word_embeddings" in variants:
        sizes["tie_word_embeddings"] = variants["tie_word_embeddings"]
    if family in ("t5", "bart"):
        # the family's own architecture (T5: RMSNorm pre-norm, relative buckets; BART: post-norm,
        # learned positions) or its --preset's: only sizes (and tying) come from the arguments, variants
        # from --config_overrides.
        # A noised source is a little longer than its block (sentinels, <s> and </s>, a mask for
        # each of BART's 0-length spans): twice the block, and 16 more than it for a short block
        # (4 tokens and 3 inserted masks would pass 2 x 4 every few thousand blocks).
        block = data_args.block_size
        return sizes | {
            "max_position_embeddings": model_args.max_position_embeddings or max(2 * block, block + 16)
        }
    return (
        sizes
        | variants
        | dict(max_position_embeddings=model_args.max_position_embeddings or data_args.block_size)
    )


def _pretransformer_sizes(model_args, tokenizer, family: str) -> dict:
    """The shared size arguments mapped onto each pre-Transformer family: `hidden_size` is the
    embedding width (and the recurrent state size), `intermediate_size` the feed-forward LM's tanh
    layer, `num_hidden_layers` the recurrent layers (of the encoder and of the decoder)."""
    specials = dict(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    common = dict(
        hidden_dropout=model_args.hidden_dropout,
        tie_word_embeddings=model_args.variants()["tie_word_embeddings"],
    )
    sizes = {
        "ngram": lambda: dict(order=model_args.ngram_order, smoothing=model_args.ngram_smoothing),
        "ffnn": lambda: dict(
            context_size=model_args.ngram_order - 1,
            hidden_size=model_args.hidden_size,
            intermediate_size=model_args.intermediate_size or 4 * model_args.hidden_size,
            **common,
        ),
        "rnn": lambda: dict(
            cell_type=model_args.cell_type,
            hidden_size=model_args.hidden_size,
            num_hidden_layers=model_args.num_hidden_layers,
            **common,
        ),
        "rnn_seq2seq": lambda: dict(
            cell_type=model_args.cell_type,
            embedding_size=model_args.hidden_size,
            hidden_size=model_args.hidden_size,
            encoder_layers=model_args.num_hidden_layers,
            decoder_layers=model_args.num_hidden_layers,
            attention=model_args.rnn_attention,
            **common,
        ),
    }[family]()
    return {"vocab_size": len(tokenizer), **specials, **sizes}


def family_config(family: str, model_args, data_args, tokenizer, objective_config: dict):
    """The config of a fresh model of `family` sized to the tokenizer: the family's `--preset` (or its
    defaults), then the arguments' sizes and the variant flags given, then `objective_config`, then
    `config_overrides`.

    Args:
        objective_config: the config fields the objective sets (`Objective.model_config`), applied
            before `config_overrides`, which come last.

    Raises:
        ValueError: naming `preset`, when it is not one of the family's presets (`check_preset`).
    """
    check_preset(family, model_args.preset)
    config_cls = FAMILIES[family].config_class
    if family in TRANSFORMERS:
        kwargs = _transformer_sizes(model_args, data_args, tokenizer, family)
    else:
        kwargs = _pretransformer_sizes(model_args, tokenizer, family)
    return FAMILIES[family].config_from_preset(
        model_args.preset, **{**kwargs, **objective_config, **model_args.overrides(config_cls)}
    )


def build_family_model(
    family: str, auto_class, model_args, data_args, tokenizer, objective_config: dict
) -> torch.nn.Module:
    """A fresh model of `family` sized to the tokenizer (`family_config`): the family's head behind
    `auto_class` (`hf_lm.families.FAMILIES`)."""
    model_cls = FAMILIES[family].head(auto_class)
    return model_cls(family_config(family, model_args, data_args, tokenizer, objective_config))
