"""hf_lm's own pipelines: extractive question answering, which transformers 5 removed.

transformers 5 dropped its `question-answering` pipeline and refuses that name for custom
pipelines, although encoders fine-tuned on SQuAD (`AutoModelForQuestionAnswering`, e.g.
`HfLmBertForQuestionAnswering`) still answer questions by pointing at a span of the context.
`HfLmQuestionAnsweringPipeline` brings that back under a new name; `import hf_lm` registers it:

    import hf_lm  # registers "hflm-question-answering" (alias "extractive-question-answering")
    from transformers import pipeline

    qa = pipeline("hflm-question-answering", model="my-bert-qa", trust_remote_code=True)
    qa(question="Where is the cat?", context="The cat sat on the mat.")
    # {'score': 0.93, 'start': 15, 'end': 22, 'answer': 'the mat'}

Shipped code (it imports only torch and transformers): `save_pretrained` of a question-answering
head copies this file next to the weights and names the pipeline in `config.custom_pipelines`, so
`pipeline("hflm-question-answering", model=folder, trust_remote_code=True)` needs no hf_lm.
`hf_lm.pipelines` re-exports it; importing this module registers the task (idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from transformers import AutoModelForQuestionAnswering
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.pipelines.base import ChunkPipeline

from .hflm_common import _bool, _non_negative_int, _positive_int
from .hflm_inputs import (
    check_unicode_text,
)

logger = logging.getLogger(__name__)

QA_TASK = "hflm-question-answering"
QA_TASK_ALIAS = "extractive-question-answering"

# transformers' former QA pipeline defaults (SQuAD-sized windows)
DEFAULT_MAX_SEQ_LEN = 384
DEFAULT_MAX_DOC_STRIDE = 128
DEFAULT_MAX_ANSWER_LEN = 15


def _example(item: Any) -> dict[str, str]:
    """One `{"question", "context"}` dict, validated (ValueError naming what is missing or empty)."""
    if not isinstance(item, Mapping):
        raise ValueError(
            f"Each question-answering input must be a dict with 'question' and 'context', got {type(item).__name__}."
        )
    for key in ("question", "context"):
        if item.get(key) is None:
            raise ValueError(
                f"Missing `{key}`: pass question=... and context=... (or a dict with both keys)."
            )
        if not isinstance(item[key], str):
            raise ValueError(f"`{key}` must be a string, got {type(item[key]).__name__}.")
        if not item[key].strip():
            raise ValueError(
                f"`{key}` is empty: there is nothing to {'answer' if key == 'question' else 'search'}."
            )
        check_unicode_text(item[key], f"`{key}`")
    return {"question": item["question"], "context": item["context"]}


def _collect_examples(args: tuple, kwargs: dict) -> tuple[list[dict[str, str]], bool]:
    """The examples of one call and whether it was a single one (pops question/context from kwargs).

    Accepted: `question=str, context=str`; `question=[...], context=[...]` of equal length;
    `question=[...], context=str` (several questions on one context); positional `(question,
    context)` strings; one dict; a list of dicts.
    """
    question, context = kwargs.pop("question", None), kwargs.pop("context", None)
    if args and (question is not None or context is not None):
        raise ValueError("Pass the inputs either positionally or as question=/context=, not both.")
    if len(args) == 2 and all(isinstance(a, str) for a in args):
        question, context = args
    elif len(args) == 1:
        inputs = args[0]
        if isinstance(inputs, Mapping):
            return [_example(inputs)], True
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                raise ValueError("The list of question-answering inputs is empty.")
            return [_example(item) for item in inputs], False
        raise ValueError(
            "Question answering takes question=... and context=..., a dict with both keys or a list of "
            f"such dicts, got {type(inputs).__name__}."
        )
    elif args:
        raise ValueError(
            f"Expected (question, context) strings or one dict/list, got {len(args)} positional inputs."
        )

    if isinstance(question, (list, tuple)):
        contexts = [context] * len(question) if isinstance(context, str) else context
        if not isinstance(contexts, (list, tuple)) or len(contexts) != len(question) or not question:
            raise ValueError(
                "With a list of questions, `context` must be one string or a list of the same (non-zero) length."
            )
        return [_example({"question": q, "context": c}) for q, c in zip(question, contexts)], False
    return [_example({"question": question, "context": context})], True


class HfLmQuestionAnsweringPipeline(ChunkPipeline):
    """Extractive question answering: the answer is the span of the context the model points at.

    Works with any model whose output has `start_logits` and `end_logits` (B, T) and a fast
    tokenizer (offsets and sequence ids come from the `tokenizers` library). The question and the
    context are encoded as a pair, `[CLS] question [SEP] context [SEP]` for BERT. A context too
    long for `max_seq_len` is cut into overlapping windows (`doc_stride` tokens shared between
    neighbours), each run through the model; the best spans of all windows compete.

    Scoring follows transformers' former `QuestionAnsweringPipeline`: in each window the start
    and end logits of the context tokens (plus `[CLS]`, the "no answer" position of SQuAD 2.0)
    go through a softmax, and a span (s, e) with s <= e, e - s + 1 <= `max_answer_len`, both
    inside the context, scores p_start(s) * p_end(e). A span seen in two overlapping windows
    counts once, with its better score.

    Call arguments (also accepted by `pipeline(...)` as defaults):
        question, context: strings, lists of strings, or pass one dict / a list of dicts.
        top_k: number of answers (default 1). With 1 the result is a dict, otherwise a list of
            up to `top_k` dicts sorted by score.
        max_answer_len: longest answer in tokens (default 15).
        max_seq_len: tokens per window, question and special tokens included (default
            min(384, tokenizer.model_max_length, config.max_position_embeddings)).
        doc_stride: tokens shared by neighbouring windows (default min(max_seq_len // 2, 128),
            capped to fit); must be smaller than the room the question leaves for the context.
        handle_impossible_answer: also propose the empty answer `""` at (0, 0), scored by the
            smallest p_start([CLS]) * p_end([CLS]) over the windows (default False).
        align_to_words: widen the answer to whole words of the pre-tokenizer, so it never starts
            or ends inside a word (default True).

    Returns:
        `{"score": float, "start": int, "end": int, "answer": str}` with
        `answer == context[start:end]` (character indices), or a list of those.
    """

    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.tokenizer is None or not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(
                f"The {QA_TASK} pipeline needs a fast tokenizer (PreTrainedTokenizerFast): answers are cut "
                "from the context with the character offsets only fast tokenizers provide."
            )
        # windows are padded on the right: with absolute positions counted from index 0 (transformers'
        # BertForQuestionAnswering) left padding would move every token, and batches would no longer
        # equal single inputs
        if self.tokenizer.padding_side != "right":
            logger.info("Padding the windows on the right for the %s pipeline.", QA_TASK)
            self.tokenizer.padding_side = "right"

    def __call__(self, *args, **kwargs):
        """Answer one question (`question=..., context=...` or a dict) or a list of them.

        See the class docstring for the parameters. A list input returns a list of results.
        """
        examples, single = _collect_examples(args, kwargs)
        return super().__call__(examples[0] if single else examples, **kwargs)

    def _sanitize_parameters(
        self,
        top_k=None,
        max_answer_len=None,
        max_seq_len=None,
        doc_stride=None,
        handle_impossible_answer=None,
        align_to_words=None,
        **kwargs,
    ):
        if kwargs:
            raise ValueError(
                f"Unknown argument(s) {sorted(kwargs)} for the {QA_TASK} pipeline; it takes top_k, "
                "max_answer_len, max_seq_len, doc_stride, handle_impossible_answer and align_to_words."
            )
        preprocess, postprocess = {}, {}
        if max_seq_len is not None:
            _positive_int("max_seq_len", max_seq_len)
            preprocess["max_seq_len"] = max_seq_len
        if doc_stride is not None:
            _non_negative_int("doc_stride", doc_stride)
            preprocess["doc_stride"] = doc_stride
        if top_k is not None:
            _positive_int("top_k", top_k)
            postprocess["top_k"] = top_k
        if max_answer_len is not None:
            _positive_int("max_answer_len", max_answer_len)
            postprocess["max_answer_len"] = max_answer_len
        if handle_impossible_answer is not None:
            _bool("handle_impossible_answer", handle_impossible_answer)
            postprocess["handle_impossible_answer"] = handle_impossible_answer
        if align_to_words is not None:
            _bool("align_to_words", align_to_words)
            postprocess["align_to_words"] = align_to_words
        return preprocess, {}, postprocess

    def _default_max_seq_len(self) -> int:
        limits = [DEFAULT_MAX_SEQ_LEN, self.tokenizer.model_max_length]
        max_positions = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(max_positions, int) and max_positions > 0:
            limits.append(max_positions)
        return min(limits)

    def preprocess(
        self, example: dict[str, str], max_seq_len: int | None = None, doc_stride: int | None = None
    ):
        """Yield one model input per window of the context, with what postprocessing needs."""
        question, context = example["question"], example["context"]
        if max_seq_len is None:
            max_seq_len = self._default_max_seq_len()
        # the windows hold max_seq_len tokens: the whole question, the special tokens, and the context
        n_question = len(self.tokenizer(question, add_special_tokens=False)["input_ids"])
        room = max_seq_len - n_question - self.tokenizer.num_special_tokens_to_add(pair=True)
        if room < 1:
            raise ValueError(
                f"The question is {n_question} tokens long: with the special tokens it leaves no room for the "
                f"context in max_seq_len={max_seq_len} tokens. Shorten the question or raise `max_seq_len`."
            )
        if doc_stride is None:
            doc_stride = min(max_seq_len // 2, DEFAULT_MAX_DOC_STRIDE, room - 1)
        elif doc_stride >= room:
            # `tokenizers` would panic (an uncatchable-looking pyo3 PanicException) on this
            raise ValueError(
                f"`doc_stride` ({doc_stride}) must be smaller than the {room} context tokens a window holds "
                f"(max_seq_len={max_seq_len} minus a {n_question}-token question and the special tokens)."
            )
        encoded = self.tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=max_seq_len,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        model_keys = ["input_ids", "attention_mask", "token_type_ids"]
        n_windows = len(encoded["input_ids"])
        for i in range(n_windows):
            sequence_ids = encoded.sequence_ids(i)
            offsets = [tuple(span) for span in encoded["offset_mapping"][i]]
            word_ids = encoded.encodings[i].word_ids
            word_spans = []  # (start, end) characters of the whole word each context token belongs to
            for j, seq in enumerate(sequence_ids):
                span = None
                if seq == 1 and word_ids[j] is not None:
                    span = encoded.encodings[i].word_to_chars(word_ids[j], 1)
                word_spans.append(tuple(span) if span is not None else offsets[j])
            inputs = {key: torch.tensor([encoded[key][i]]) for key in model_keys if key in encoded}
            yield {
                **inputs,
                # 1 = cannot be part of an answer (question, special tokens); padded with 1 when batched
                "p_mask": torch.tensor([[0 if seq == 1 else 1 for seq in sequence_ids]]),
                "offsets": offsets,
                "word_spans": word_spans,
                "example": example,
                "is_last": i == n_windows - 1,
            }

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        model_inputs = {
            k: inputs[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in inputs
        }
        output = self.model(**model_inputs)
        if (
            not isinstance(output, Mapping)
            or output.get("start_logits") is None
            or output.get("end_logits") is None
        ):
            raise ValueError(
                f"{type(self.model).__name__} returns no `start_logits`/`end_logits`: the {QA_TASK} pipeline "
                "needs an extractive question-answering model (AutoModelForQuestionAnswering, e.g. "
                "HfLmBertForQuestionAnswering)."
            )
        # "start_logits" first: the batch unroller reads the batch size from the first entry
        return {
            "start_logits": output["start_logits"],  # (B, T)
            "end_logits": output["end_logits"],  # (B, T)
            **{k: v for k, v in inputs.items() if k != "token_type_ids"},
        }

    def postprocess(
        self,
        all_outputs: list[dict[str, Any]],
        top_k: int = 1,
        max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
        handle_impossible_answer: bool = False,
        align_to_words: bool = True,
    ):
        """Merge the best spans of every window of one example into its answer(s)."""
        context = all_outputs[0]["example"]["context"]
        best: dict[tuple[int, int], float] = {}  # (start char, end char) -> best score
        null_score = 1.0
        for out in all_outputs:
            n = len(out["offsets"])  # this window's tokens; the tensors may be padded to a batch's length
            T = out["start_logits"].shape[-1]
            real = slice(T - n, T) if self.tokenizer.padding_side == "left" else slice(0, n)
            start_logits = out["start_logits"][0, real].float()  # (n,)
            end_logits = out["end_logits"][0, real].float()  # (n,)
            allowed = out["p_mask"][0, real] == 0  # (n,) context tokens
            if "attention_mask" in out:
                allowed &= out["attention_mask"][0, real].bool()
            if not bool(allowed.any()):
                continue
            # [CLS] stays in the softmax as SQuAD 2.0's "no answer" position (the first token otherwise)
            null_index = 0
            if self.tokenizer.cls_token_id is not None:
                cls_positions = (out["input_ids"][0, real] == self.tokenizer.cls_token_id).nonzero()
                null_index = int(cls_positions[0]) if len(cls_positions) else 0
            in_softmax = allowed.clone()
            in_softmax[null_index] = True
            p_start = start_logits.masked_fill(~in_softmax, float("-inf")).softmax(-1)  # (n,)
            p_end = end_logits.masked_fill(~in_softmax, float("-inf")).softmax(-1)  # (n,)
            null_score = min(null_score, float(p_start[null_index] * p_end[null_index]))

            scores = p_start[:, None] * p_end[None, :]  # (n, n): row = start token, column = end token
            index = torch.arange(n)
            length = index[None, :] - index[:, None] + 1  # (n, n) tokens in the span
            valid = allowed[:, None] & allowed[None, :] & (length >= 1) & (length <= max_answer_len)
            # at most n * max_answer_len valid spans: sorting them all is cheap
            flat_valid = valid.flatten().nonzero().squeeze(-1)
            flat_scores = scores.flatten()[flat_valid]
            order = flat_scores.argsort(descending=True)
            spans = out["word_spans"] if align_to_words else out["offsets"]
            # this window's top_k distinct character spans (word alignment can merge token spans);
            # a span in the overall top_k is necessarily among those of the window it scores best in
            seen: set[tuple[int, int]] = set()
            for score, flat in zip(flat_scores[order].tolist(), flat_valid[order].tolist()):
                s, e = divmod(flat, n)
                span = (spans[s][0], spans[e][1])
                if span in seen:
                    continue
                seen.add(span)
                best[span] = max(score, best.get(span, -1.0))
                if len(seen) == top_k:
                    break

        answers = [
            {"score": score, "start": start, "end": end, "answer": context[start:end]}
            for (start, end), score in best.items()
        ]
        if handle_impossible_answer or not answers:
            if not answers:
                logger.warning("No span of the context can be an answer; returning the empty answer.")
            answers.append({"score": null_score, "start": 0, "end": 0, "answer": ""})
        answers = sorted(answers, key=lambda a: a["score"], reverse=True)[:top_k]
        return answers[0] if top_k == 1 else answers


def register_pipelines() -> None:
    """Register hf_lm's pipelines with transformers' `pipeline()` (idempotent; `import hf_lm` calls it).

    `"hflm-question-answering"` (alias `"extractive-question-answering"`) loads its model with
    `AutoModelForQuestionAnswering`, so a saved folder works with `trust_remote_code=True`.
    """
    registered = (PIPELINE_REGISTRY.supported_tasks.get(QA_TASK) or {}).get("impl")
    # the same class loaded again from a saved folder (another module path) keeps the first one
    if getattr(registered, "__qualname__", None) != HfLmQuestionAnsweringPipeline.__qualname__:
        PIPELINE_REGISTRY.register_pipeline(
            QA_TASK,
            pipeline_class=HfLmQuestionAnsweringPipeline,
            pt_model=AutoModelForQuestionAnswering,
            type="text",
        )
    PIPELINE_REGISTRY.task_aliases.setdefault(QA_TASK_ALIAS, QA_TASK)


register_pipelines()

__all__ = ["HfLmQuestionAnsweringPipeline", "QA_TASK", "QA_TASK_ALIAS", "register_pipelines"]
