"""Sliding-window perplexity of a causal LM, as an `evaluate` metric module.

Load it offline from this folder (or this file):

    >>> import evaluate
    >>> ppl = evaluate.load("hf_lm/metrics/perplexity")
    >>> ppl.compute(predictions=["some text"], model=model, tokenizer=tokenizer, max_length=64, stride=32)

`evaluate` copies this script into its modules cache, so the algorithm is imported from the
installed package (`hf_lm.metrics.sliding_window`) rather than from a sibling file.
"""

from __future__ import annotations

import logging
import math

import datasets
import evaluate
import torch

from hf_lm.metrics.sliding_window import bits_per_unit, default_window, sliding_window_perplexity

logger = logging.getLogger(__name__)

_CITATION = """\
@misc{hf_perplexity_guide,
  title = {Perplexity of fixed-length models},
  author = {Hugging Face},
  howpublished = {\\url{https://huggingface.co/docs/transformers/perplexity}}
}
"""

_DESCRIPTION = """\
Perplexity of a causal language model on texts, computed with a sliding window: windows of at most
`max_length` tokens start every `stride` tokens and score only the tokens no earlier window scored,
so every scored token is scored exactly once with at least `max_length - stride` tokens of context
(after the start). With `stride < max_length` every token but a text's first is scored; with
`stride == max_length` the first token of every chunk is context only. Also reports bits per
token, per character and per word (total NLL / ln 2 / count).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the texts to score; each text is its own token stream unless
        `concatenate=True`, which joins them with `separator` into one stream.
    model: an in-memory causal LM (preferred), or
    model_id (str): a local folder loadable by `AutoModelForCausalLM`/`AutoTokenizer`.
    trust_remote_code (bool): run model code shipped in the `model_id` folder (default False, as in
        transformers; hf_lm's own model types load with the installed hf_lm without it).
    tokenizer: the tokenizer for `model` (required with `model`).
    max_length (int): window size; defaults to the model's `max_position_embeddings` (1024 for
        models without learned positions: n-gram, feed-forward, recurrent).
    stride (int): step between windows, `1 <= stride <= max_length`; defaults to `max_length // 2`.
    batch_size (int): windows per forward pass (default 1).
    add_start_token (bool): prepend the tokenizer's BOS token so the first token is scored too.
    device (str): defaults to the model's device.
    concatenate (bool): score the texts as one stream (default False).
    separator (str): joins the texts when concatenating (default "\\n\\n").
    num_characters, num_words (int): override the character/word counts (default: from the texts,
        characters = `len(text)`, words = `len(text.split())`).
Returns:
    perplexity: corpus perplexity, exp(total NLL / total scored tokens).
    loss: total NLL / total scored tokens (nats).
    perplexities: one per stream; mean_perplexity: their mean.
    nll_sum, n_tokens, bits_per_token, bits_per_character, bits_per_word.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Perplexity(evaluate.Metric):
    """Sliding-window perplexity (see `hf_lm.metrics.sliding_window`)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string")}),
            reference_urls=["https://huggingface.co/docs/transformers/perplexity"],
        )

    def _compute(
        self,
        predictions,
        model=None,
        tokenizer=None,
        model_id: str | None = None,
        max_length: int | None = None,
        stride: int | None = None,
        batch_size: int = 1,
        add_start_token: bool = False,
        device: str | None = None,
        concatenate: bool = False,
        separator: str = "\n\n",
        num_characters: int | None = None,
        num_words: int | None = None,
        trust_remote_code: bool = False,
    ) -> dict:
        if model is None:
            if model_id is None:
                raise ValueError("Pass `model` (and `tokenizer`) or `model_id`.")
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(model_id, trust_remote_code=trust_remote_code)
            if device is not None:
                model = model.to(device)
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust_remote_code)
        if tokenizer is None:
            raise ValueError("Pass `tokenizer` with `model`.")
        if max_length is None:
            max_length = default_window(model.config)
        if stride is None:
            stride = max(1, max_length // 2)

        texts = [separator.join(predictions)] if concatenate else list(predictions)
        start = []
        if add_start_token:
            if tokenizer.bos_token_id is None:
                raise ValueError("`add_start_token=True` needs a tokenizer with a `bos_token`.")
            start = [tokenizer.bos_token_id]

        nll_sum, n_tokens, perplexities = 0.0, 0, []
        for text in texts:
            ids = start + tokenizer(text, add_special_tokens=False)["input_ids"]
            result = sliding_window_perplexity(
                model,
                torch.tensor(ids, dtype=torch.long),
                max_length=max_length,
                stride=stride,
                device=device,
                batch_size=batch_size,
            )
            nll_sum += result["nll_sum"]
            n_tokens += result["n_tokens"]
            perplexities.append(result["perplexity"])

        if num_characters is None:
            num_characters = sum(len(t) for t in texts)
        if num_words is None:
            num_words = sum(len(t.split()) for t in texts)
        loss = nll_sum / n_tokens if n_tokens else float("nan")
        logger.info("perplexity over %d texts: %d tokens scored", len(texts), n_tokens)
        return {
            "perplexity": math.exp(loss) if n_tokens else float("nan"),
            "loss": loss,
            "perplexities": perplexities,
            "mean_perplexity": sum(perplexities) / len(perplexities) if perplexities else float("nan"),
            "nll_sum": nll_sum,
            "n_tokens": n_tokens,
            "bits_per_token": bits_per_unit(nll_sum, n_tokens),
            "bits_per_character": bits_per_unit(nll_sum, num_characters),
            "bits_per_word": bits_per_unit(nll_sum, num_words),
        }
