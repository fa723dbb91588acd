"""What every hf_lm model class shares: `HfLmPreTrainedModel` (init, capabilities, saving with its card and
pipelines), the pipeline tables, and the generation of fixed-window models.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

import math
import os
import shutil
import sys

import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.utils import cached_file

from .hflm_common import (
    CACHE_NAMES,
    cache_argument,
    check_fits_in_memory,
    logger,
)
from .hflm_inputs import (
    cache_lengths,
)

# ----------------------------------------------------------------------------------------------
# Base class shared by every family
# ----------------------------------------------------------------------------------------------


# model-class suffix -> the Hub's pipeline tag for the model card
_PIPELINE_TAGS = {
    "ForCausalLM": "text-generation",
    "ForMaskedLM": "fill-mask",
    "ForPreTraining": "fill-mask",
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMultipleChoice": "multiple-choice",
    "ForConditionalGeneration": "text2text-generation",
    "ForMaskPredict": "text2text-generation",
    "Model": "feature-extraction",
}


# hf_lm's own pipelines (the tasks transformers 5 removed), carried by the folders of the heads they
# serve: task -> (the class in a shipped pipeline file, the Auto class the pipeline loads). A head's
# `save_pretrained` writes them to `config.custom_pipelines` (transformers' format) and copies the
# file, so `pipeline(task, model=folder, trust_remote_code=True)` works where hf_lm is not installed.
_QA = ("hflm_pipelines.HfLmQuestionAnsweringPipeline", "AutoModelForQuestionAnswering")
QA_PIPELINES = {"hflm-question-answering": _QA, "extractive-question-answering": _QA}
_TRANSLATION = ("hflm_pipelines_seq2seq.HfLmTranslationPipeline", "AutoModelForSeq2SeqLM")
SEQ2SEQ_PIPELINES = {
    "hflm-text2text-generation": (
        "hflm_pipelines_seq2seq.HfLmText2TextGenerationPipeline",
        "AutoModelForSeq2SeqLM",
    ),
    "hflm-summarization": ("hflm_pipelines_seq2seq.HfLmSummarizationPipeline", "AutoModelForSeq2SeqLM"),
    "hflm-translation": _TRANSLATION,
    # T5's pairs, read back from the task name by the translation pipeline
    **{f"hflm-translation_en_to_{tgt}": _TRANSLATION for tgt in ("de", "fr", "ro")},
}


def _pipeline_files(model, folder_hint) -> dict[str, str] | None:
    """{file name: source path} of the pipeline files `model`'s class ships, or None if one is missing.

    The files sit next to the modeling file (hf_lm installed); a model loaded with
    `trust_remote_code=True` has only its modeling files in transformers' module cache, so the
    folder it was loaded from is searched too, or, for a Hub repository, its files (from the local
    Hub cache, or downloaded as `from_pretrained` would).
    """
    names = {impl.split(".")[0] + ".py" for impl, _ in model._hflm_pipelines.values()}
    places = [os.path.dirname(sys.modules[type(model).__module__].__file__), folder_hint]
    found = {}
    for name in names:
        paths = [os.path.join(p, name) for p in places if p and os.path.isdir(p)]
        found[name] = next((path for path in paths if os.path.isfile(path)), None)
        if found[name] is None and folder_hint and not os.path.isdir(folder_hint):
            found[name] = _hub_file(folder_hint, name, getattr(model.config, "_commit_hash", None))
        if found[name] is None:
            logger.warning("%s not found next to the model's code: the folder ships no pipeline.", name)
            return None
    return found


def _hub_file(repo_id: str, name: str, revision: str | None) -> str | None:
    """The local path of file `name` of Hub repository `repo_id` (at the loaded revision), or None."""
    try:
        return cached_file(repo_id, name, revision=revision, _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):  # not a repository id, offline and not cached, no access
        return None


def without_hflm_pipelines(custom_pipelines: dict | None) -> dict:
    """`config.custom_pipelines` less hf_lm's own entries (those whose code is an `hflm_pipelines*` file)."""
    return {
        task: info
        for task, info in (custom_pipelines or {}).items()
        if not str(info.get("impl", "")).startswith("hflm_pipelines")
    }


def installed_pipelines_dropped(config_class: type, kwargs: dict) -> dict:
    """A config's kwargs without the folder's hf_lm `custom_pipelines` when hf_lm itself is installed.

    `pipeline(task, model=DIR)` runs a folder's `custom_pipelines` before its registry and then asks
    for `trust_remote_code`. With hf_lm installed (the config class lives in the `hf_lm` package),
    `import hf_lm` has already registered the same pipelines, so the folder's copy is dropped and the
    call works as it did before folders carried them; loaded as remote code (no hf_lm), they stay.
    A head's `save_pretrained` writes them again.
    """
    custom = kwargs.get("custom_pipelines")
    if not custom or not config_class.__module__.startswith("hf_lm."):
        return kwargs
    kept = without_hflm_pipelines(custom)
    return (
        {**kwargs, "custom_pipelines": kept}
        if kept
        else {k: v for k, v in kwargs.items() if k != "custom_pipelines"}
    )


class HfLmPreTrainedModel(PreTrainedModel):
    """Init, capabilities and saving shared by every hf_lm model. Families set `config_class`."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    _no_split_modules = ["TransformerBlock"]
    _skip_keys_device_placement = list(CACHE_NAMES)
    #: hf_lm pipelines this head's folders carry (`QA_PIPELINES`, `SEQ2SEQ_PIPELINES`), or none
    _hflm_pipelines: dict[str, tuple[str, str]] = {}

    def __init__(self, config, *inputs, **kwargs):
        # A config validates itself when it is built, but not when a value is set afterwards, which
        # `AutoConfig.from_pretrained(folder, hidden_act=...)`, `from_pretrained(folder,
        # num_attention_heads=3)`, `config.update({...})` and `config.x = ...` all do. Validating again
        # where the model is built gives those the same ValueError naming the field, instead of a
        # bare KeyError or a size mismatch deep inside the layers.
        validate = getattr(config, "validate_hflm", None)
        if callable(validate):
            validate()
        check_fits_in_memory(config)
        super().__init__(config, *inputs, **kwargs)

    def _resolve_parallel_plans(self, distributed_config):
        """transformers' plans, after checking that tensor parallelism can split the heads: each
        process must hold whole key/value groups (the sharded projections are cut evenly)."""
        tp_size = getattr(distributed_config, "tp_size", 1) or 1
        for name in ("num_key_value_heads", "num_attention_heads"):
            heads = getattr(self.config, name, None)
            if tp_size > 1 and heads and heads % tp_size:
                raise ValueError(
                    f"Tensor parallelism over {tp_size} processes needs `{name}` ({heads}) divisible by "
                    f"{tp_size}: each process holds whole key/value groups."
                )
        return super()._resolve_parallel_plans(distributed_config)

    def _init_weights(self, module):
        """N(0, 0.02) everywhere (BERT, BART); in a pre-norm stack (GPT-2) the residual output
        projections are scaled by 1/sqrt(2 * layers).

        Written per leaf module (Linear, Embedding, norm): for remote-code models transformers 5 skips
        `_init_weights` on modules without parameters of their own (Attention, MLP), so the Linears
        carry their role (`init_role`, set where they are built) instead.
        """
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])  # padding embeds to zero, as in BERT
        elif getattr(module, "init_role", None) == "norm":  # LayerNorm, RMSNorm (hflm_layers)
            init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        pre_norm = getattr(self.config, "norm_position", "pre") == "pre"
        if pre_norm and getattr(module, "init_role", None) in ("attn_out", "ff_out"):
            # each block adds two residual branches to a stream no norm rescales: keep the sum's
            # variance flat in depth (GPT-2, nanoGPT). A post-norm stack renormalizes after every
            # branch, and its references (BERT, BART) do not scale. Scaled, a BART-style model
            # trained from scratch on Multi30k kept every encoder output the same vector; unscaled,
            # it recovered within 200 steps (benchmarks/results/leaderboard_translation)
            init.normal_(module.weight, mean=0.0, std=std / math.sqrt(2 * self.config.num_hidden_layers))

    def create_masks_for_generate(
        self, attention_mask=None, past_key_values=None, inputs_embeds=None, **kwargs
    ):
        """Keep generate()'s (B, S) padding mask 2D; widen it to a static cache's full length.

        transformers calls this for compileable (static) caches only, and would turn the mask into a
        4D one with its own masking utilities; hf_lm models build their masks themselves (padding,
        causality, prefix, ALiBi bias) in one place. Widened (empty slots = padding), the mask has
        the same shape at every decoding step, so a compiled step is not recompiled as it grows.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if attention_mask is None or attention_mask.dim() != 2 or past_key_values is None:
            return attention_mask
        _, kv_len, _ = cache_lengths(past_key_values, inputs_embeds.shape[1])
        width = attention_mask.shape[-1]
        return F.pad(attention_mask, (0, kv_len - width)) if kv_len > width else attention_mask

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save as transformers does, with every Auto class of this family in `config.json`'s `auto_map`.

        transformers writes only the saved class's entry; `AutoModel` (and so feature extraction)
        on a folder saved from the LM head would then fail under `trust_remote_code`.
        """
        module = sys.modules[type(self).__module__]
        file_stem = type(self).__module__.rsplit(".", 1)[-1]
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and issubclass(obj, PreTrainedModel)
                and obj.__module__ == module.__name__
                and obj.config_class is type(self.config)  # one modeling file may serve several families
            ):
                if obj._auto_class is not None:
                    auto_map[obj._auto_class] = f"{file_stem}.{name}"
        if auto_map:
            self.config.auto_map = auto_map
        pipeline_files = self._set_custom_pipelines()
        result = super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            for name, source in pipeline_files.items():
                shutil.copyfile(source, os.path.join(save_directory, name))
        card = os.path.join(save_directory, "README.md")
        if kwargs.get("is_main_process", True) and not os.path.exists(card):
            # every saved model gets a card; hf_lm.cards writes a fuller one (data, metrics) over it
            with open(card, "w", encoding="utf-8") as f:
                f.write(self._default_model_card())
        return result

    def _set_custom_pipelines(self) -> dict[str, str]:
        """Name this head's hf_lm pipelines in `config.custom_pipelines`; returns the files to copy.

        A head without pipelines drops hf_lm's entries a config may have kept from another head.
        """
        custom = without_hflm_pipelines(getattr(self.config, "custom_pipelines", None))
        files = _pipeline_files(self, self.name_or_path) if self._hflm_pipelines else None
        for task, (impl, auto_class) in self._hflm_pipelines.items() if files else ():
            custom[task] = {"impl": impl, "pt": [auto_class], "type": "text"}
        if custom or getattr(self.config, "custom_pipelines", None):
            self.config.custom_pipelines = custom
        return files or {}

    def _default_model_card(self) -> str:
        """A minimal Hugging Face model card: front matter the Hub indexes, the architecture, usage."""
        cfg, name = self.config, type(self).__name__
        auto_class = self._auto_class or "AutoModel"
        task = next((tag for suffix, tag in _PIPELINE_TAGS.items() if name.endswith(suffix)), None)
        rows = "\n".join(f"| {k} | {v} |" for k, v in self._card_fields())
        return (
            "---\nlibrary_name: transformers\nlicense: apache-2.0\n"
            + (f"pipeline_tag: {task}\n" if task else "")
            + f"tags:\n- hf_lm\n- {cfg.model_type}\n---\n\n"
            + f"# {name}\n\nAn hf_lm model (`{name}`). Its modeling code ships in this folder: load it with "
            + "`trust_remote_code=True`, no hf_lm install needed.\n\n"
            + f"| | |\n|---|---|\n{rows}\n\n## Usage\n\n```python\n"
            + f"from transformers import {auto_class}\n\n"
            + f'model = {auto_class}.from_pretrained("path/or/hub-id", trust_remote_code=True)\n```\n'
        )

    def _card_fields(self) -> list[tuple[str, object]]:
        """(name, value) rows of the default card's architecture table; non-Transformer families override it."""
        cfg = self.config
        rows = [
            ("model_type", cfg.model_type),
            ("layers", cfg.num_hidden_layers),
            ("hidden_size", cfg.hidden_size),
            ("attention heads / key-value heads", f"{cfg.num_attention_heads} / {cfg.num_key_value_heads}"),
            ("feed-forward", f"{cfg.hidden_act}, {cfg.intermediate_size}"),
            ("positions", cfg.position_embedding_type),
            ("norm", f"{cfg.norm_type}, {cfg.norm_position}-norm"),
            ("vocabulary", cfg.vocab_size),
        ]
        # ALBERT's options, where a family uses them
        embedding_size = getattr(cfg, "embedding_size", None)
        if embedding_size not in (None, cfg.hidden_size):
            rows.append(("embedding_size (factorized)", embedding_size))
        groups = getattr(cfg, "num_hidden_groups", None)
        if groups not in (None, cfg.num_hidden_layers):
            rows.append(("distinct blocks (shared across layers)", groups))
        if getattr(cfg, "attention_pattern", "dense") != "dense":
            rows.append(("sparse attention pattern", cfg.attention_pattern))
        return rows + [("parameters", f"{self.num_parameters():,}")]


def trainer_shifts_labels(model_class: type) -> type:
    """Class decorator of a causal LM head: `Trainer` then shifts its labels under label smoothing.

    With `label_smoothing_factor > 0`, `Trainer.compute_loss` pops `labels`, runs the model without
    them and scores the logits itself. It shifts the labels (position t predicts token t+1) only for
    a model whose class name is a value of transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`; for any
    other class it compares position t with token t, which silently trains a causal LM to copy its
    input. The documented `AutoModelForCausalLM.register(config_class, model_class)` (which
    `import hf_lm` calls) fills another table, which `Trainer` does not read, and it is not called
    at all when a folder is loaded with `trust_remote_code=True`. So each causal LM adds itself to
    that public table here, in the shipped code, under its own `model_type` (a name transformers
    does not use), without overwriting any entry. Nothing else changes: the Auto mappings built on
    the table skip model types that are not transformers' own configs.
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(model_class.config_class.model_type, model_class.__name__)
    return model_class


class FixedWindowGeneration:
    """Generation for models that read a fixed window of the last tokens and nothing else (the
    n-gram model, Bengio's feed-forward LM): there is no cache, and each step feeds only the window,
    which is the whole context of the next prediction, so a step costs the same at any length.

    Mix in before `GenerationMixin`; the model names its window in `generation_window()`.
    """

    def generation_window(self) -> int:
        raise NotImplementedError

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # nothing to cache: rescoring the window is exact and cheap

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, inputs_embeds=None, **kwargs):
        if inputs_embeds is not None:
            raise ValueError(f"{type(self).__name__} generates from `input_ids` only, not `inputs_embeds`.")
        window = self.generation_window()
        inputs = {"input_ids": input_ids[:, -window:], "logits_to_keep": 1}
        if attention_mask is not None:
            inputs["attention_mask"] = attention_mask[:, -window:]
        # generate(output_hidden_states=True, ...) asks each step for them through these
        for name in ("output_hidden_states", "output_attentions"):
            if kwargs.get(name):
                inputs[name] = kwargs[name]
        return inputs
