"""Configuration of hf_lm's ELECTRA models (`model_type="hflm_electra"`), an extension of the BERT family.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.

ELECTRA (Clark et al., 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than
Generators") is BERT's encoder trained by replaced-token detection: a small masked-LM generator fills
the masked positions with samples and the discriminator tells, for every token, whether it was
replaced. Its architecture is BERT's without the pooler, with factorized embeddings (`embedding_size`
E, projected to the hidden size C when E != C) as in ELECTRA-small, so the config is BERT's own.
"""

from __future__ import annotations

from .hflm_configuration_bert import HfLmBertConfig


class HfLmElectraConfig(HfLmBertConfig):
    """BERT's encoder config with ELECTRA-small's sizes as defaults (the discriminator's: 12 layers,
    hidden size 256, 4 heads, feed-forward 1024, embeddings E = 128 projected to 256).

    The fields are `HfLmBertConfig`'s; the generator of joint pretraining is another
    `HfLmElectraConfig` (ELECTRA's generator is a smaller masked LM with the same embedding size).

    Example:
        >>> from hf_lm import HfLmElectraConfig, HfLmElectraForPreTraining
        >>> config = HfLmElectraConfig(vocab_size=1000, num_hidden_layers=2)
        >>> discriminator = HfLmElectraForPreTraining(config)
    """

    model_type = "hflm_electra"
    # Two named starting points (Clark et al., 2020, Table 6; `from_preset`), each a handful of
    # overrides of the ELECTRA-small discriminator defaults. The generator of the joint pretraining is
    # built from the discriminator's config by the training objective (`training.objectives.electra`), not here.
    PRESETS = {
        "electra-small": {},
        "electra-base": {
            "hidden_size": 768,
            "embedding_size": 768,
            "num_attention_heads": 12,
        },
    }

    # ELECTRA-small (transformers' `ElectraConfig` defaults)
    hidden_size: int = 256
    num_attention_heads: int = 4  # the feed-forward width defaults to 4 * hidden_size = 1024
    embedding_size: int | None = 128


# the table's older name
ELECTRA_PRESETS = HfLmElectraConfig.PRESETS
