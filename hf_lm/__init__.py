"""hf_lm: every language-model architecture of a modern NLP course, as first-class Hugging Face models.

`import hf_lm` registers every hf_lm config and model with transformers' Auto classes, and for
auto class, so `save_pretrained` writes `auto_map` and copies the model code next to the weights
(checkpoints then load with `trust_remote_code=True` where hf_lm is not installed).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
)

from .models.hflm_configuration_gpt import HfLmGPTConfig
from .models.hflm_modeling_gpt import (
    HfLmGPTForCausalLM,
    HfLmGPTForSequenceClassification,
    HfLmGPTModel,
    HfLmGPTPreTrainedModel,
)
from .utils import kv_cache_bytes

__version__ = "0.1.0"

# (config, [(auto class, model class), ...]) for every family
_REGISTRY = [
    (
        HfLmGPTConfig,
        [
            (AutoModel, HfLmGPTModel),
            (AutoModelForCausalLM, HfLmGPTForCausalLM),
            (AutoModelForSequenceClassification, HfLmGPTForSequenceClassification),
        ],
    ),
]


def _register() -> None:
    for config_class, models in _REGISTRY:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models:
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)


_register()

__all__ = [
    "HfLmGPTConfig",
    "HfLmGPTPreTrainedModel",
    "HfLmGPTModel",
    "HfLmGPTForCausalLM",
    "HfLmGPTForSequenceClassification",
    "kv_cache_bytes",
]
