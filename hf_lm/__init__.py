"""hf_lm: every language-model architecture of a modern NLP course, as first-class Hugging Face models.

`import hf_lm` registers every family of the family table (`hf_lm.families.FAMILIES`: each config
and its heads) with transformers' Auto classes, and for auto class, so `save_pretrained` writes
`auto_map` and copies the model code next to the weights (checkpoints then load with
`trust_remote_code=True` where hf_lm is not installed). When peft is installed, it also gives
peft its default target modules for hf_lm's model types (`hf_lm.integrations`).
"""

from transformers import AutoConfig

from .families import FAMILIES, Family, family_of, head_info
from .integrations import register_peft
from .models.hflm_configuration_bert import BERT_PRESETS, HfLmBertConfig
from .models.hflm_configuration_electra import ELECTRA_PRESETS, HfLmElectraConfig
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
    HfLmBertPreTrainedModel,
)
from .models.hflm_modeling_electra import (
    HfLmElectraForMaskedLM,
    HfLmElectraForPreTraining,
    HfLmElectraForSequenceClassification,
    HfLmElectraForTokenClassification,
    HfLmElectraModel,
)
from .models.hflm_modeling_ffnn import HfLmFFNNForCausalLM, HfLmFFNNModel, HfLmFFNNPreTrainedModel
from .models.hflm_modeling_gpt import (
    HfLmGPTForCausalLM,
    HfLmGPTForSequenceClassification,
    HfLmGPTModel,
    HfLmGPTPreTrainedModel,
)
from .models.hflm_modeling_ngram import HfLmNGramForCausalLM, HfLmNGramPreTrainedModel, NGramCounter
from .models.hflm_modeling_rnn import HfLmRNNForCausalLM, HfLmRNNModel, HfLmRNNPreTrainedModel
from .models.hflm_modeling_rnn_seq2seq import (
    HfLmRNNSeq2SeqForConditionalGeneration,
    HfLmRNNSeq2SeqModel,
    HfLmRNNSeq2SeqPreTrainedModel,
)
from .models.hflm_modeling_seq2seq import (
    HfLmBartForConditionalGeneration,
    HfLmBartForMaskPredict,
    HfLmBartForSequenceClassification,
    HfLmBartModel,
    HfLmBartPreTrainedModel,
    HfLmT5ForConditionalGeneration,
    HfLmT5ForMaskPredict,
    HfLmT5ForSequenceClassification,
    HfLmT5Model,
    HfLmT5PreTrainedModel,
    shift_tokens_right,
)
from .pipelines import HfLmQuestionAnsweringPipeline  # noqa: F401  (registers hf_lm's pipelines)
from .pipelines_seq2seq import HfLmText2TextGenerationPipeline  # noqa: F401  (registers the seq2seq pipelines)
from .utils import kv_cache_bytes

__version__ = "0.1.0"


def _register() -> None:
    """Register every family of the table with transformers' Auto classes, and for remote code."""
    for family in FAMILIES.values():
        config_class = family.config_class
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in family.heads.items():
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)


_register()
register_peft()  # a no-op without peft

__all__ = [
    "FAMILIES",
    "Family",
    "family_of",
    "head_info",
    "HfLmNGramConfig",
    "HfLmNGramPreTrainedModel",
    "HfLmNGramForCausalLM",
    "NGramCounter",
    "HfLmFFNNConfig",
    "HfLmFFNNPreTrainedModel",
    "HfLmFFNNModel",
    "HfLmFFNNForCausalLM",
    "HfLmRNNConfig",
    "HfLmRNNPreTrainedModel",
    "HfLmRNNModel",
    "HfLmRNNForCausalLM",
    "HfLmRNNSeq2SeqConfig",
    "HfLmRNNSeq2SeqPreTrainedModel",
    "HfLmRNNSeq2SeqModel",
    "HfLmRNNSeq2SeqForConditionalGeneration",
    "HfLmT5Config",
    "HfLmT5PreTrainedModel",
    "HfLmT5Model",
    "HfLmT5ForConditionalGeneration",
    "HfLmT5ForSequenceClassification",
    "HfLmT5ForMaskPredict",
    "HfLmBartConfig",
    "HfLmBartPreTrainedModel",
    "HfLmBartModel",
    "HfLmBartForConditionalGeneration",
    "HfLmBartForSequenceClassification",
    "HfLmBartForMaskPredict",
    "shift_tokens_right",
    "BERT_PRESETS",
    "HfLmBertConfig",
    "HfLmBertPreTrainedModel",
    "HfLmBertModel",
    "HfLmBertForMaskedLM",
    "HfLmBertForPreTraining",
    "HfLmBertForSequenceClassification",
    "HfLmBertForTokenClassification",
    "HfLmBertForQuestionAnswering",
    "HfLmBertForMultipleChoice",
    "ELECTRA_PRESETS",
    "HfLmElectraConfig",
    "HfLmElectraModel",
    "HfLmElectraForMaskedLM",
    "HfLmElectraForPreTraining",
    "HfLmElectraForSequenceClassification",
    "HfLmElectraForTokenClassification",
    "HfLmGPTConfig",
    "HfLmGPTPreTrainedModel",
    "HfLmGPTModel",
    "HfLmGPTForCausalLM",
    "HfLmGPTForSequenceClassification",
    "kv_cache_bytes",
]
