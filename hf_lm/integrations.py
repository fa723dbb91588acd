"""Defaults that other Hugging Face libraries look up by `model_type`, registered for hf_lm's families.

PEFT picks a method's default `target_modules` (when a `LoraConfig`, `IA3Config`, ... names none)
from module-level dicts keyed by `config.model_type`, such as
`peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`; it reads no config
attribute for them. hf_lm's model types are not in those dicts, so
`get_peft_model(model, LoraConfig(task_type="CAUSAL_LM"))` raised "Please specify `target_modules`".
`register_peft()` adds them; `import hf_lm` calls it when peft is installed. peft stays an optional
extra (`pip install hf_lm[peft]`) and the shipped model code (`hf_lm/models/`) never imports it, so
a checkpoint loaded with remote code where hf_lm is not imported has no defaults: pass
`target_modules` (the names below, or "all-linear").

The defaults adapt the attention projections, as peft's own do (Llama's `q_proj`/`v_proj`, BERT's
`query`/`value`, GPT-2's fused `c_attn`). hf_lm's self-attention computes q, k and v with one Linear,
`query_key_value` (one GEMM instead of three, its rows grouped by key/value head as Falcon's); LoRA on
it adds one low-rank update to all three, as on GPT-2's `c_attn` or Falcon's `query_key_value`.
Adapters trained before that name (targets `qkv_proj`) name a module the models no longer have.
"""

from __future__ import annotations

import importlib.util
import logging

logger = logging.getLogger(__name__)

# model_type -> LoRA's default target modules, module names that peft matches as suffixes of the
# module paths (`bridge.0` matches `model.decoder.bridge.0`)
LORA_TARGET_MODULES: dict[str, list[str]] = {
    "hflm_gpt": ["query_key_value"],
    "hflm_bert": ["query_key_value"],
    "hflm_electra": ["query_key_value"],  # BERT's encoder
    # self-attention, and the decoder's cross-attention (queries; keys and values of the encoder states)
    "hflm_t5": ["query_key_value", "q_proj", "kv_proj"],
    "hflm_bart": ["query_key_value", "q_proj", "kv_proj"],
    # Bengio et al.'s tanh hidden layer
    "hflm_ffnn": ["hidden"],
    # the attentional layer W_c (absent with attention="none") and the bridges from the encoder's
    # final state to the decoder's initial states (h, and c for an LSTM)
    "hflm_rnn_seq2seq": ["combine", "bridge.0", "bridge.1"],
}
# The recurrent LM ("hflm_rnn") has no Linear layer worth a default (its output layer is tied to the
# input embedding by default, so a merged LoRA would change the embedding too): its recurrent weights
# are parameters, not Linear modules. LoRA adapts them through peft's `target_parameters` (each
# `RecurrentLayer` reads its weights inside its own forward, where peft's wrapper substitutes W + BA,
# for the loop, the fused kernel and one-step decoding alike). peft's tables hold only module names, so
# `register_peft` also fills in `target_parameters` for these model types when a LoraConfig names
# neither `target_modules` nor `target_parameters`. The n-gram model has no weights.
LORA_TARGET_PARAMETERS: dict[str, list[str]] = {
    "hflm_rnn": ["weight_ih", "weight_hh"],
}

# IA3 (Liu et al., 2022) rescales keys, values and the feed-forward's inner activations: the
# projections that produce keys and values, and the feed-forward's output projection, whose input
# is rescaled (`feedforward_modules`). As peft's Llama and T5 defaults.
IA3_TARGET_MODULES: dict[str, list[str]] = {
    "hflm_gpt": ["query_key_value", "down_proj"],
    "hflm_bert": ["query_key_value", "down_proj"],
    "hflm_electra": ["query_key_value", "down_proj"],
    "hflm_t5": ["query_key_value", "kv_proj", "down_proj"],
    "hflm_bart": ["query_key_value", "kv_proj", "down_proj"],
}
IA3_FEEDFORWARD_MODULES: dict[str, list[str]] = {
    model_type: ["down_proj"] for model_type in IA3_TARGET_MODULES
}


def _lora_like_mappings(constants) -> list[dict]:
    """peft's default-target dicts of LoRA and of the methods that share its defaults (LoHa, LoKr,
    AdaLoRA, VeRA, OFT, ...): those whose Llama entry is LoRA's. The set differs between peft releases."""
    lora = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    mappings = [lora]
    for name, value in vars(constants).items():
        if (
            name.startswith("TRANSFORMERS_MODELS_TO_")
            and name.endswith("_TARGET_MODULES_MAPPING")
            and isinstance(value, dict)
            and value is not lora
            and value.get("llama") == lora.get("llama")
        ):
            mappings.append(value)
    return mappings


def _with_default_target_parameters(prepare):
    """Wrap LoRA's `_prepare_adapter_config` (which fills `target_modules` from peft's tables) so that a
    config naming neither `target_modules` nor `target_parameters` gets `LORA_TARGET_PARAMETERS`."""
    if getattr(prepare, "_hflm_target_parameters", False):
        return prepare  # wrapped already

    def prepare_adapter_config(self, peft_config, model_config):
        targets = LORA_TARGET_PARAMETERS.get(model_config.get("model_type"))
        if targets and peft_config.target_modules is None and not peft_config.target_parameters:
            peft_config.target_parameters = list(targets)
        return prepare(self, peft_config, model_config)

    prepare_adapter_config._hflm_target_parameters = True
    return prepare_adapter_config


def register_peft() -> bool:
    """Add hf_lm's model types to peft's default target modules (LoRA and the methods sharing its
    defaults, and IA3), and LoRA's default target parameters of the recurrent LM. Entries already
    there are kept. Returns False when peft is not installed."""
    if importlib.util.find_spec("peft") is None:
        return False
    from peft.tuners.lora import LoraModel
    from peft.utils import constants

    LoraModel._prepare_adapter_config = _with_default_target_parameters(LoraModel._prepare_adapter_config)

    for mapping in _lora_like_mappings(constants):
        for model_type, targets in LORA_TARGET_MODULES.items():
            mapping.setdefault(model_type, targets)
    for mapping, table in (
        (constants.TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING, IA3_TARGET_MODULES),
        (constants.TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING, IA3_FEEDFORWARD_MODULES),
    ):
        for model_type, targets in table.items():
            mapping.setdefault(model_type, targets)
    logger.debug("Registered hf_lm's default target modules with peft.")
    return True
