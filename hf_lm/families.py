"""The family table: every hf_lm model family defined once.

A family is one config class and the model classes built on it, each behind a transformers Auto
class. Everything that needs to know "which families exist" reads `FAMILIES`: the Auto
registration (`hf_lm/__init__.py`), the model cards (`hf_lm.cards`), the conversion from
transformers (`hf_lm.convert`), the tokenizers trained for a family (`special_tokens`) and the
training and fine-tuning scripts.

Not shipped with checkpoints' model code: shipped files cannot import this module (it imports
every family). The one thing shipped code needs, a head's pipeline tag, stays in the shipped
`_PIPELINE_TAGS`, and `head_info` reads it from there.

    >>> from hf_lm.families import family_of, head_info
    >>> list(family_of("hflm_bert").presets)
    ['bert', 'roberta', 'albert']
    >>> FAMILIES["gpt"].presets["llama"]["position_embedding_type"]
    'rope'
    >>> head_info(HfLmBertForQuestionAnswering)
    ('question-answering', 'AutoModelForQuestionAnswering')
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    PretrainedConfig,
    PreTrainedModel,
)

from .models.hflm_configuration_bert import HfLmBertConfig
from .models.hflm_configuration_electra import HfLmElectraConfig
from .models.hflm_configuration_ffnn import HfLmFFNNConfig
from .models.hflm_configuration_gpt import HfLmGPTConfig
from .models.hflm_configuration_ngram import HfLmNGramConfig
from .models.hflm_configuration_rnn import HfLmRNNConfig
from .models.hflm_configuration_rnn_seq2seq import HfLmRNNSeq2SeqConfig
from .models.hflm_configuration_seq2seq import HfLmBartConfig, HfLmT5Config
from .models.hflm_modeling_bert import (
    HfLmBertForMaskedLM,
    HfLmBertForMultipleChoice,
    HfLmBertForPreTraining,
    HfLmBertForQuestionAnswering,
    HfLmBertForSequenceClassification,
    HfLmBertForTokenClassification,
    HfLmBertModel,
)
from .models.hflm_modeling_electra import (
    HfLmElectraForMaskedLM,
    HfLmElectraForPreTraining,
    HfLmElectraForSequenceClassification,
    HfLmElectraForTokenClassification,
    HfLmElectraModel,
)
from .models.hflm_modeling_ffnn import HfLmFFNNForCausalLM, HfLmFFNNModel
from .models.hflm_modeling_gpt import HfLmGPTForCausalLM, HfLmGPTForSequenceClassification, HfLmGPTModel
from .models.hflm_modeling_ngram import HfLmNGramForCausalLM
from .models.hflm_modeling_rnn import HfLmRNNForCausalLM, HfLmRNNModel
from .models.hflm_modeling_rnn_seq2seq import HfLmRNNSeq2SeqForConditionalGeneration, HfLmRNNSeq2SeqModel
from .models.hflm_modeling_seq2seq import (
    HfLmBartForConditionalGeneration,
    HfLmBartForMaskPredict,
    HfLmBartForSequenceClassification,
    HfLmBartModel,
    HfLmT5ForConditionalGeneration,
    HfLmT5ForMaskPredict,
    HfLmT5ForSequenceClassification,
    HfLmT5Model,
)
from .models.hflm_pretrained import (
    _PIPELINE_TAGS,
)

# ----------------------------------------------------------------------------------------------
# Special tokens of the tokenizers trained for each family (role -> token, transformers' names).
# ----------------------------------------------------------------------------------------------

# GPT-2's convention: one end-of-text token serves as bos/eos/unk. The pad token is separate:
# DataCollatorForLanguageModeling turns pad labels into -100, which would also drop every EOS
# label if pad == eos, and the model would never learn to stop.
GPT_SPECIAL_TOKENS: dict[str, str] = {
    "bos_token": "<|endoftext|>",
    "eos_token": "<|endoftext|>",
    "unk_token": "<|endoftext|>",
    "pad_token": "<|pad|>",
}

# BERT's convention (Devlin et al., 2019): "[CLS] A [SEP] B [SEP]", "[MASK]" for masked-LM inputs.
# With cls_token and sep_token, `train_tokenizer` adds that template (see `bert_post_processor`).
BERT_SPECIAL_TOKENS: dict[str, str] = {
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "mask_token": "[MASK]",
}

# T5's convention (Raffel et al., 2020): no bos; "</s>" ends inputs and targets, "<pad>" pads and
# starts the decoder. In this order they get T5's ids: <pad> 0, </s> 1, <unk> 2. Add the span
# sentinels `<extra_id_0>`, `<extra_id_1>`, ... with `training.data.tokenizer.add_sentinel_tokens`.
T5_SPECIAL_TOKENS: dict[str, str] = {
    "pad_token": "<pad>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
}

# BART's convention (Lewis et al., 2020), inherited from RoBERTa/fairseq: <s> 0, <pad> 1, </s> 2,
# <unk> 3, and "<mask>" for text infilling. No cls/sep roles, so `train_tokenizer` adds no template.
BART_SPECIAL_TOKENS: dict[str, str] = {
    "bos_token": "<s>",
    "pad_token": "<pad>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
}


@dataclass(frozen=True, eq=False)  # one instance per family: compared and hashed by identity
class Family:
    """One model family: its config, its heads and what a tokenizer trained for it needs.

    Args:
        name: the family's short name ("gpt", "bert", ...), as the scripts' `--family` spells it.
        config_class: the family's `PretrainedConfig` subclass (its `model_type` is "hflm_<name>").
        heads: transformers Auto class -> hf_lm model class, one entry per head.
        special_tokens: the special tokens of a tokenizer trained for this family; `None` for
            GPT-style defaults (`GPT_SPECIAL_TOKENS`).
        convert_from: transformers model types that `hf_lm.convert.from_transformers` imports
            into this family.
        decoder_start: encoder-decoders: the special-token role whose id starts the decoder
            (`decoder_start_token_id`): T5's "pad_token", BART's (fairseq's) "eos_token".
        objectives: the pretraining objectives `training.train` trains the family with (its
            `--objective` names: "clm", "mlm", "electra", "span_corruption", "bart_denoising").
    """

    name: str
    config_class: type
    heads: dict
    special_tokens: dict | None
    convert_from: tuple[str, ...] = ()
    decoder_start: str | None = None
    objectives: tuple[str, ...] = ()

    @property
    def model_type(self) -> str:
        return self.config_class.model_type

    @property
    def presets(self) -> MappingProxyType:
        """The family's named recipes, preset name -> the config fields it sets (read-only): the
        table of the family's config class (`config_class.PRESETS`, which `config_class.from_preset`
        reads), empty when it has none. Each table lives in its family's configuration file, so a
        saved model's folder carries only its own family's files."""
        return MappingProxyType(self.config_class.PRESETS)

    @property
    def is_encoder_decoder(self) -> bool:
        return AutoModelForSeq2SeqLM in self.heads

    def head(self, auto_class) -> type:
        """The model class behind `auto_class` (e.g. `AutoModelForCausalLM`) in this family."""
        if auto_class not in self.heads:
            names = sorted(auto.__name__ for auto in self.heads)
            raise ValueError(f"Family {self.name!r} has no {auto_class.__name__} head; it has {names}.")
        return self.heads[auto_class]

    def config_from_preset(self, preset: str | None, **kwargs) -> PretrainedConfig:
        """`config_class.from_preset(preset, **kwargs)`, or `config_class(**kwargs)` when `preset` is None."""
        if preset is None:
            return self.config_class(**kwargs)
        if preset not in self.presets:
            raise ValueError(
                f"Family {self.name!r} has no preset {preset!r}; choose one of {list(self.presets)}."
            )
        return self.config_class.from_preset(preset, **kwargs)


_BERT_MLM_TOKENS = {**BERT_SPECIAL_TOKENS, "eos_token": "[SEP]"}  # [SEP] also separates packed documents

FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            "gpt",
            HfLmGPTConfig,
            {
                AutoModel: HfLmGPTModel,
                AutoModelForCausalLM: HfLmGPTForCausalLM,
                AutoModelForSequenceClassification: HfLmGPTForSequenceClassification,
            },
            special_tokens=None,
            convert_from=("gpt2", "llama", "mistral", "mixtral"),
            objectives=("clm",),
        ),
        Family(
            "bert",
            HfLmBertConfig,
            {
                AutoModel: HfLmBertModel,
                AutoModelForMaskedLM: HfLmBertForMaskedLM,
                AutoModelForPreTraining: HfLmBertForPreTraining,
                AutoModelForSequenceClassification: HfLmBertForSequenceClassification,
                AutoModelForTokenClassification: HfLmBertForTokenClassification,
                AutoModelForQuestionAnswering: HfLmBertForQuestionAnswering,
                AutoModelForMultipleChoice: HfLmBertForMultipleChoice,
            },
            special_tokens=_BERT_MLM_TOKENS,
            convert_from=("bert", "roberta"),
            objectives=("mlm",),
        ),
        # ELECTRA (Clark et al., 2020): BERT's encoder; AutoModelForPreTraining is the discriminator
        # (replaced-token detection), AutoModelForMaskedLM the generator
        Family(
            "electra",
            HfLmElectraConfig,
            {
                AutoModel: HfLmElectraModel,
                AutoModelForMaskedLM: HfLmElectraForMaskedLM,
                AutoModelForPreTraining: HfLmElectraForPreTraining,
                AutoModelForSequenceClassification: HfLmElectraForSequenceClassification,
                AutoModelForTokenClassification: HfLmElectraForTokenClassification,
            },
            special_tokens=_BERT_MLM_TOKENS,
            convert_from=("electra",),
            objectives=("electra",),
        ),
        Family(
            "t5",
            HfLmT5Config,
            {
                AutoModel: HfLmT5Model,
                AutoModelForSeq2SeqLM: HfLmT5ForConditionalGeneration,
                AutoModelForSequenceClassification: HfLmT5ForSequenceClassification,
                # Mask-Predict's conditional masked LM (transformers also maps BART under this Auto class)
                AutoModelForMaskedLM: HfLmT5ForMaskPredict,
            },
            special_tokens=T5_SPECIAL_TOKENS,
            convert_from=("t5", "switch_transformers"),
            decoder_start="pad_token",
            objectives=("span_corruption",),
        ),
        Family(
            "bart",
            HfLmBartConfig,
            {
                AutoModel: HfLmBartModel,
                AutoModelForSeq2SeqLM: HfLmBartForConditionalGeneration,
                AutoModelForSequenceClassification: HfLmBartForSequenceClassification,
                AutoModelForMaskedLM: HfLmBartForMaskPredict,
            },
            special_tokens=BART_SPECIAL_TOKENS,
            convert_from=("bart",),
            decoder_start="eos_token",
            objectives=("bart_denoising",),
        ),
        Family(
            "rnn",
            HfLmRNNConfig,
            {AutoModel: HfLmRNNModel, AutoModelForCausalLM: HfLmRNNForCausalLM},
            special_tokens=None,
            objectives=("clm",),
        ),
        Family(
            "rnn_seq2seq",
            HfLmRNNSeq2SeqConfig,
            {AutoModel: HfLmRNNSeq2SeqModel, AutoModelForSeq2SeqLM: HfLmRNNSeq2SeqForConditionalGeneration},
            # the recurrent encoder-decoder reads BART's conventions (bos, eos, pad, no sentinels)
            special_tokens=BART_SPECIAL_TOKENS,
            decoder_start="eos_token",
            objectives=("span_corruption", "bart_denoising"),
        ),
        Family(
            "ffnn",
            HfLmFFNNConfig,
            {AutoModel: HfLmFFNNModel, AutoModelForCausalLM: HfLmFFNNForCausalLM},
            special_tokens=None,
            objectives=("clm",),
        ),
        Family(
            "ngram",
            HfLmNGramConfig,
            {AutoModelForCausalLM: HfLmNGramForCausalLM},
            special_tokens=None,
            objectives=("clm",),  # fitted by counting (`training.ngram_fit`), no gradient steps
        ),
    )
}


def family_of(model_or_config_or_model_type) -> Family:
    """The family of a model, a config (instance or class), a model class, a `model_type` or a family name.

    Raises:
        ValueError: naming the known families, when the input belongs to none of them.
    """
    thing = model_or_config_or_model_type
    if isinstance(thing, PreTrainedModel):
        thing = thing.config
    if isinstance(thing, type) and issubclass(thing, PreTrainedModel):
        thing = thing.config_class
    if isinstance(thing, PretrainedConfig) or (
        isinstance(thing, type) and issubclass(thing, PretrainedConfig)
    ):
        thing = thing.model_type
    if isinstance(thing, str):
        for family in FAMILIES.values():
            if thing in (family.name, family.model_type):
                return family
    known = ", ".join(f"{f.name} ({f.model_type})" for f in FAMILIES.values())
    raise ValueError(f"{model_or_config_or_model_type!r} is not an hf_lm family; known families: {known}.")


def head_info(model_class) -> tuple[str, str]:
    """(Hub pipeline tag, Auto class name) of an hf_lm head class (or of a model: its class).

    The Auto class is the one the family table registers the class under (or, for a subclass, its
    nearest registered base); the pipeline tag comes from the shipped `_PIPELINE_TAGS` (class-name
    suffix -> tag), the same table a saved model's default card reads.

    Raises:
        ValueError: for a class that is not registered in any family.
    """
    if not isinstance(model_class, type):
        model_class = type(model_class)
    for base in model_class.__mro__:
        for family in FAMILIES.values():
            for auto_class, head in family.heads.items():
                if head is base:
                    tag = next(
                        tag for suffix, tag in _PIPELINE_TAGS.items() if base.__name__.endswith(suffix)
                    )
                    return tag, auto_class.__name__
    raise ValueError(f"{model_class.__name__} is not a head of any hf_lm family ({sorted(FAMILIES)}).")


def all_heads() -> list[tuple[Family, type, type]]:
    """(family, Auto class, model class) for every registered head, in table order."""
    return [(family, auto, model) for family in FAMILIES.values() for auto, model in family.heads.items()]
