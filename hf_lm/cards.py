"""Hugging Face model cards (`README.md`) for hf_lm checkpoints.

Not shipped with checkpoints' model code. The card is YAML front matter (library, tags,
pipeline tag, license: what the Hub indexes) followed by a Markdown body rendered from a
`string.Template` in the repository's `model_cards/` folder: `<model_type>.md` when it exists,
else `default.md`, else (an installed package without that folder) `FALLBACK_TEMPLATE`.

Template placeholders (`$name`; write `$$` for a literal dollar):
    model_name, model_id, model_id_repr, model_type, model_class, auto_class, pipeline_tag,
    pipeline_usage (the snippet's `pipeline(...)` line: the task transformers 5 runs for this head,
    hf_lm's own for the tasks it removed, or a comment where there is none), max_new_tokens (40, less
    where learned positions leave no room for them after a short prompt), own_pipelines (a paragraph
    on the text-to-text pipelines a generation head's folder carries, else empty),
    num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, attention_kind,
    head_dim, intermediate_size, hidden_act, position_embedding_type, norm_type, norm_position,
    tie_word_embeddings, num_parameters, num_parameters_non_embedding, vocab_size, context_length,
    architecture (a ready-made table of the above), tokenizer, training_data, metrics (a table),
    hyperparameters (a table), training_time, loss_plot (a Markdown image when `loss.png` is in the
    folder, else empty), prompt, prompt_repr, notes, plus every key of `extra`.

Evaluation results given as `eval_results` also go into the front matter as `model-index`
metadata (`huggingface_hub.EvalResult`), which the Hub shows as an evaluation widget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from string import Template

from huggingface_hub import EvalResult, ModelCardData
from transformers.pipelines import PIPELINE_REGISTRY

from .families import head_info

logger = logging.getLogger(__name__)

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "model_cards"
LICENSE = "apache-2.0"

# Used when the repository's model_cards/ folder is not there (e.g. a wheel install).
FALLBACK_TEMPLATE = """# $model_name

A `$model_class` (model type `$model_type`) built from scratch with hf_lm. The model code ships
in this folder: load it with `trust_remote_code=True`.

## Architecture

$architecture

## Tokenizer

$tokenizer

## Training data

$training_data

## Training procedure

$hyperparameters

Training time: $training_time.
$loss_plot

## Evaluation

$metrics

## Intended use and limitations

A small model trained from scratch, for learning and for testing tooling. It imitates the surface
of its training text and knows nothing reliable: do not use it to produce facts or decisions.

## Usage

```python
from transformers import $auto_class, AutoTokenizer

model = $auto_class.from_pretrained($model_id_repr, trust_remote_code=True)
# the tokenizer needs the flag too: without it transformers asks about the config's code
tokenizer = AutoTokenizer.from_pretrained($model_id_repr, trust_remote_code=True)
```
$notes
"""

_NOT_SET = "n/a"


def _count(n: int) -> str:
    """1234567 -> '1.23M (1,234,567)'."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit} ({n:,})"
    return f"{n:,}"


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _metrics_table(metrics: Mapping[str, object] | None) -> str:
    if not metrics:
        return "No evaluation results were reported."
    rows = "\n".join(f"| {name} | {_value(value)} |" for name, value in metrics.items())
    return f"| Metric | Value |\n|---|---|\n{rows}"


def _hyperparameters_table(hyperparameters: Mapping[str, object] | None) -> str:
    if not hyperparameters:
        return "Not documented."
    rows = "\n".join(f"| {name} | {_value(value)} |" for name, value in hyperparameters.items())
    return f"| Hyperparameter | Value |\n|---|---|\n{rows}"


def _duration(seconds: float | None) -> str:
    """93784.5 -> '1 d 2 h 3 min 4.5 s (93,784.5 s)'."""
    if seconds is None:
        return "not documented"
    parts, rest = [], float(seconds)
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if rest >= scale:
            parts.append(f"{int(rest // scale)} {unit}")
            rest %= scale
    parts.append(f"{rest:.1f} s")
    return " ".join(parts) + (f" ({seconds:,.1f} s)" if len(parts) > 1 else "")


def _eval_results(
    eval_results: Mapping[str, float] | None, dataset_name: str | None, pipeline_tag: str
) -> list[EvalResult] | None:
    """`model-index` entries, one per finite metric (the Hub's YAML has no NaN)."""
    if not eval_results:
        return None
    if not dataset_name:
        raise ValueError("`eval_results` needs `dataset_name`: model-index results name their dataset.")
    results = []
    for metric, value in eval_results.items():
        if value is None or not math.isfinite(value):
            logger.warning("Evaluation result %s=%r is not finite: left out of model-index.", metric, value)
            continue
        results.append(
            EvalResult(
                task_type=pipeline_tag,
                dataset_type=dataset_name,
                dataset_name=dataset_name,
                dataset_split="held-out",
                metric_type=metric,
                metric_value=float(value),
            )
        )
    return results or None


def _tokenizer_summary(tokenizer) -> str:
    if tokenizer is None:
        return "Not documented."
    # transformers' own list of special-token roles (bos, eos, unk, sep, pad, cls, mask)
    special = {role: getattr(tokenizer, role, None) for role in tokenizer.SPECIAL_TOKENS_ATTRIBUTES}
    special = ", ".join(f"{role.removesuffix('_token')} `{tok}`" for role, tok in special.items() if tok)
    model = (
        type(tokenizer.backend_tokenizer.model).__name__ if hasattr(tokenizer, "backend_tokenizer") else None
    )
    kind = f" ({model} model)" if model else ""
    return (
        f"`{type(tokenizer).__name__}`{kind} with {len(tokenizer):,} tokens, trained from scratch; "
        f"special tokens: {special or 'none'}; padding side `{tokenizer.padding_side}`."
    )


def _attention_kind(config) -> str:
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if heads is None:
        return _NOT_SET
    if kv == heads:
        return "multi-head"
    return "multi-query" if kv == 1 else "grouped-query"


def _fields(
    model, save_directory: Path, dataset, metrics, tokenizer, hyperparameters, training_time_s
) -> dict[str, str]:
    config = model.config
    pipeline_tag, auto_class = head_info(model)  # from the family table
    model_id = save_directory.as_posix()

    def get(name, default=_NOT_SET):
        value = getattr(config, name, None)
        return default if value is None else value

    fields = {
        "model_name": save_directory.resolve().name,
        "model_id": model_id,
        "model_type": config.model_type,
        "model_class": type(model).__name__,
        "auto_class": auto_class,
        "pipeline_tag": pipeline_tag,
        "num_hidden_layers": get("num_hidden_layers"),
        "hidden_size": get("hidden_size"),
        "num_attention_heads": get("num_attention_heads"),
        "num_key_value_heads": get("num_key_value_heads", get("num_attention_heads")),
        "attention_kind": _attention_kind(config),
        "head_dim": get("head_dim"),
        "intermediate_size": get("intermediate_size"),
        "hidden_act": get("hidden_act"),
        "position_embedding_type": get("position_embedding_type"),
        "norm_type": get("norm_type"),
        "norm_position": get("norm_position"),
        "tie_word_embeddings": get("tie_word_embeddings"),
        "num_parameters": _count(model.num_parameters()),
        "num_parameters_non_embedding": _count(model.num_parameters(exclude_embeddings=True)),
        "vocab_size": get("vocab_size"),
        "context_length": get("max_position_embeddings"),
        "tokenizer": _tokenizer_summary(tokenizer),
        "training_data": dataset or "Not documented.",
        "metrics": _metrics_table(metrics),
        "hyperparameters": _hyperparameters_table(hyperparameters),
        "training_time": _duration(training_time_s),
        "loss_plot": (
            "\n![Training and held-out loss](loss.png)\n" if (save_directory / "loss.png").is_file() else ""
        ),
        "prompt": "The",
        "max_new_tokens": str(_snippet_new_tokens(config)),
        "notes": "",
    }
    rows = [
        ("Layers", fields["num_hidden_layers"]),
        ("Hidden size", fields["hidden_size"]),
        (
            "Attention",
            f"{fields['num_attention_heads']} heads, {fields['num_key_value_heads']} key/value heads",
        ),
        ("Feed-forward", f"{fields['hidden_act']}, width {fields['intermediate_size']}"),
        ("Positions", fields["position_embedding_type"]),
        ("Normalization", f"{fields['norm_type']} ({fields['norm_position']})"),
        ("Parameters", fields["num_parameters"]),
        ("Vocabulary", fields["vocab_size"]),
        ("Context", fields["context_length"]),
    ]
    if getattr(config, "num_attention_heads", None) is None and hasattr(model, "_card_fields"):
        # not a Transformer (n-gram, feed-forward, recurrent): the family describes itself
        rows = [(name, value) for name, value in model._card_fields() if name != "model_type"]
    fields["architecture"] = "| | |\n|---|---|\n" + "\n".join(
        f"| {name} | {value} |" for name, value in rows if _NOT_SET not in str(value)
    )
    return {name: str(value) for name, value in fields.items()}


def _pipeline_usage(model, pipeline_tag: str, model_id_repr: str) -> str:
    """The usage snippet's pipeline line for this head.

    The Hub's tag is not always a task `pipeline()` runs: transformers 5 removed question answering
    (hf_lm's own task, which the folder carries, replaces it) and never had multiple choice.
    """
    own = list(getattr(model, "_hflm_pipelines", None) or {})
    task = own[0] if own else pipeline_tag
    if task not in PIPELINE_REGISTRY.get_supported_tasks():
        return f"# transformers has no {pipeline_tag} pipeline: call the model on tokenized inputs"
    return f'pipe = pipeline("{task}", model={model_id_repr}, trust_remote_code=True)'


def _own_pipelines_note(model, model_id_repr: str) -> str:
    """A paragraph on the hf_lm pipelines this head's folder carries (text-to-text ones), else empty."""
    own = [task for task in getattr(model, "_hflm_pipelines", None) or {} if "_to_" not in task]
    if "hflm-translation" not in own:
        return ""
    others = ", ".join(f"`{task}`" for task in own if task != "hflm-translation")
    return (
        "transformers 5 has no text-to-text pipelines any more; this repository carries hf_lm's own, "
        f'no hf_lm install needed: `pipeline("hflm-translation", model={model_id_repr}, '
        f"trust_remote_code=True)` (also {others}).\n"
    )


def _snippet_new_tokens(config, wanted: int = 40, prompt_room: int = 8) -> int:
    """Tokens the snippet generates: `wanted`, or what a learned position table leaves after a prompt."""
    if getattr(config, "position_embedding_type", None) != "learned":
        return wanted
    return max(1, min(wanted, config.max_position_embeddings - prompt_room))


def _template(model_type: str) -> tuple[str, str]:
    """(template text, where it came from)."""
    for path in (TEMPLATE_DIR / f"{model_type}.md", TEMPLATE_DIR / "default.md"):
        if path.is_file():
            return path.read_text(encoding="utf-8"), str(path)
    return FALLBACK_TEMPLATE, "hf_lm.cards.FALLBACK_TEMPLATE"


def write_model_card(
    model,
    save_directory,
    *,
    dataset: str | None = None,
    metrics: Mapping[str, object] | None = None,
    tokenizer=None,
    extra: Mapping[str, object] | None = None,
    hyperparameters: Mapping[str, object] | None = None,
    training_time_s: float | None = None,
    eval_results: Mapping[str, float] | None = None,
    dataset_name: str | None = None,
) -> Path:
    """Write a Hugging Face model card `README.md` for `model` into `save_directory`.

    Args:
        model: a `PreTrainedModel` (its config and class name fill the card).
        save_directory: the checkpoint folder (created if missing); also the id in the usage snippet.
        dataset: Markdown describing the training data.
        metrics: metric name -> value, rendered as a table (floats to 4 significant digits).
        tokenizer: the tokenizer saved with the model, summarized in the card.
        extra: more template fields, or overrides of the computed ones (`prompt`, `notes`,
            `model_name`, `model_id` ...).
        hyperparameters: name -> value of the training settings, rendered as a table.
        training_time_s: wall time of the training run in seconds.
        eval_results: metric type (e.g. "perplexity", "loss") -> value, written to the front
            matter as `model-index` results on `dataset_name` (non-finite values are left out).
        dataset_name: the evaluation dataset's name (a Hub dataset id where there is one);
            required with `eval_results`.

    Returns:
        The path of the written `README.md`.

    Raises:
        ValueError: the template uses a placeholder that is not a known field, or
            `eval_results` is given without `dataset_name`.
    """
    save_directory = Path(save_directory)
    save_directory.mkdir(parents=True, exist_ok=True)
    fields = _fields(model, save_directory, dataset, metrics, tokenizer, hyperparameters, training_time_s)
    fields.update({str(name): str(value) for name, value in (extra or {}).items()})
    for name in ("model_id", "prompt"):  # Python literals for the usage snippet
        fields.setdefault(f"{name}_repr", repr(fields[name]))
    fields.setdefault(
        "pipeline_usage", _pipeline_usage(model, fields["pipeline_tag"], fields["model_id_repr"])
    )
    fields.setdefault("own_pipelines", _own_pipelines_note(model, fields["model_id_repr"]))

    text, source = _template(model.config.model_type)
    try:
        body = Template(text).substitute(fields)
    except KeyError as err:
        raise ValueError(
            f"Model-card template {source} uses unknown placeholder ${err.args[0]}; known: {sorted(fields)}."
        ) from None
    except ValueError as err:  # a lone `$`: write `$$` in templates
        raise ValueError(f"Model-card template {source}: {err}") from None

    pipeline_tag = fields["pipeline_tag"]
    results = _eval_results(eval_results, dataset_name, pipeline_tag)
    card_data = ModelCardData(
        model_name=fields["model_name"] if results else None,
        eval_results=results,
        library_name="transformers",
        license=LICENSE,
        pipeline_tag=pipeline_tag,
        tags=list(dict.fromkeys(["hf_lm", model.config.model_type, pipeline_tag])),
    )
    path = save_directory / "README.md"
    path.write_text(f"---\n{card_data.to_yaml()}\n---\n\n{body.strip()}\n", encoding="utf-8")
    logger.info("Wrote the model card %s (template %s).", path, source)
    return path
