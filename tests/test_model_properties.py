"""One suite of model properties, run over every model class of every family (as transformers'
`ModelTesterMixin` does), so that a property holds everywhere or fails naming the class.

`hf_lm.testing.FAMILY_CASES` has a tiny model and a valid batch for each registered class. Properties:

- save/load in process, and remote code: every class, and every config variant the classes' tiny
  defaults leave out (the GPT and BERT variant grids, ALBERT sharing, mixtures of experts, sparse
  attention, imported Llama and BERT checkpoints, Mask-Predict decoding), saved and reloaded with
  `trust_remote_code=True` in ONE fresh interpreter where `hf_lm` cannot be imported
  (tests/remote_code.py), giving the in-process outputs, greedy and beam tokens; shipped code imports
  only torch, transformers, the standard library and its siblings;
- generation: cached equals uncached (greedy and beam), and a static cache equals the dynamic one
  where the class supports it (`_can_compile_fullgraph`); the cache is taken as `past_key_values`
  (transformers <= 5.23) or `cache` (>= 5.24, what `generate()` passes there) alike, and returned
  under the installed version's name;
- padding: a padded row gives what the row gives alone (forward of every head, and `generate()`);
- `resize_token_embeddings` keeps forward working, new ids included;
- feature extraction from `input_ids` alone where transformers' counterpart allows it;
- contiguous logits (so `.view(-1, V)` works) for every batch size;
- `num_items_in_batch`: the token losses are summed and divided by it, as transformers' are;
- training: the loss reaches every parameter with a finite, non-zero gradient (the gradients' parity
  with transformers' reference models is tests/test_training_parity.py), and activation checkpointing
  gives the same loss and gradients;
- dtype moves: `.to(torch.float64)` gives float64 outputs equal to fp32's.

Covered by sweeps over the same cases elsewhere (not repeated here): bad input gets a `ValueError`
naming the argument (tests/test_bad_input.py), bf16 and fp16 weights and autocast, config variants
included (tests/test_precision.py), and a move to an accelerator (tests/test_device_placement.py, on a
simulated device).

A property that fails today because of a model bug is marked `xfail(strict=True)` with the bug, so the
fix turns it into a failure until the mark is removed.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import transformers
from config_variants import variant_models
from remote_code import RemoteCode, assert_shipped_code_imports_only_torch_and_transformers

from hf_lm.families import all_heads
from hf_lm.models.hflm_common import (
    CACHE_NAME,
    output_cache,
)
from hf_lm.models.hflm_losses import (
    shift_tokens_right,
)
from hf_lm.testing import FAMILY_CASES, GENERATING_CASES, STATIC_CACHE_CASES, VARIANT_CASES, VOCAB

AUTO_CLASS = {model: auto.__name__ for _, auto, model in all_heads()}
GENERATING = GENERATING_CASES


def cases(selected=FAMILY_CASES, xfail: dict[str, str] | None = None) -> list:
    """`selected` as pytest params named after the case, the known bugs marked strict xfail."""
    xfail = xfail or {}
    return [
        pytest.param(case, id=case.name, marks=[pytest.mark.xfail(strict=True, reason=xfail[case.name])])
        if case.name in xfail
        else pytest.param(case, id=case.name)
        for case in selected
    ]


TARGETS = ("labels", "length_labels", "next_sentence_label", "start_positions", "end_positions")


def inputs_only(case, batch: dict) -> dict:
    """The model inputs of a batch without its targets (the loss is a batch mean, not a row's); an
    encoder-decoder LM gets its labels as decoder inputs (padding where they are -100)."""
    inputs = {k: v for k, v in batch.items() if k not in TARGETS}
    if case.model_class.__name__.endswith("ForConditionalGeneration"):
        labels = batch["labels"]
        inputs["decoder_input_ids"] = labels.masked_fill(labels == -100, case.make_config().pad_token_id)
        inputs["decoder_attention_mask"] = (labels != -100).long()
    return inputs


def tensors(output) -> dict[str, torch.Tensor]:
    """The tensor fields of a model output (not the loss, caches or per-layer tuples)."""
    return {k: v for k, v in output.items() if torch.is_tensor(v) and k != "loss"}


# ---------------------------------------------------------------- saving, loading, remote code


@pytest.mark.parametrize("case", cases())
def test_save_and_load_give_the_same_outputs(case, tmp_path):
    model = case.make_model()
    batch = case.make_batch()
    model.save_pretrained(tmp_path)
    loaded, info = case.model_class.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    with torch.no_grad():
        expected, got = model(**batch), loaded.eval()(**batch)
    for key, value in tensors(expected).items():  # not bitwise: alignment may change a kernel's sum order
        torch.testing.assert_close(got[key], value, rtol=1e-6, atol=1e-6, msg=key)
    assert (
        type(getattr(transformers, AUTO_CLASS[case.model_class]).from_pretrained(tmp_path))
        is case.model_class
    )
    assert_shipped_code_imports_only_torch_and_transformers(tmp_path)


@pytest.mark.parametrize("case", cases(FAMILY_CASES + VARIANT_CASES))
def test_a_model_offloaded_to_disk_gives_the_in_memory_outputs(case, tmp_path):
    """accelerate's big-model inference (`device_map` with less memory than the weights) keeps every
    weight on disk and loads a module's weights only while that module is called, moving its
    arguments to its device on the way in. So a weight read without calling its module (a parent's
    `F.linear(x, self.gate.weight)`) is a meta tensor there, and a mutable argument (a cache's
    `is_updated` dict) reaches the module as a copy. Outputs and greedy tokens, from a padded batch,
    must be the in-memory model's, twice in a row."""
    model, batch = case.make_model(), case.make_batch()
    model.save_pretrained(tmp_path / "model")
    auto = getattr(transformers, AUTO_CLASS[case.model_class])
    offloaded = auto.from_pretrained(
        tmp_path / "model", device_map="auto", max_memory={"cpu": 1}, offload_folder=tmp_path / "offload"
    ).eval()
    assert set(offloaded.hf_device_map.values()) == {"disk"}, offloaded.hf_device_map
    inputs = [batch]
    if "token_type_ids" in batch:  # without them, segment A everywhere
        inputs.append({k: v for k, v in batch.items() if k != "token_type_ids"})
    with torch.no_grad():
        for x in inputs:
            expected = tensors(model(**x))
            for _ in range(2):  # a first call must not change what a second one reads
                got = tensors(offloaded(**x))
                assert got.keys() == expected.keys()
                for key, value in expected.items():
                    torch.testing.assert_close(got[key], value, rtol=1e-6, atol=1e-6, msg=key)
    if case.generates:
        greedy = dict(max_new_tokens=4, do_sample=False)
        prompt = case.prompt(batch)
        assert torch.equal(offloaded.generate(**prompt, **greedy), model.generate(**prompt, **greedy))


NO_ATTENTION = ["rnn-causal-lm", "rnn-seq2seq-lm", "ffnn-causal-lm", "ngram-causal-lm"]


@pytest.mark.parametrize(
    "case",
    cases([c for c in FAMILY_CASES if c.name in NO_ATTENTION]),
)
def test_families_without_attention_ship_no_attention_code(case, tmp_path):
    """A folder ships only the code its family uses: no attention kernels next to an LSTM's weights."""
    case.make_model().save_pretrained(tmp_path)
    shipped = "".join(path.read_text() for path in tmp_path.glob("*.py"))
    assert "scaled_dot_product_attention" not in shipped and "rotary" not in shipped.lower()


def test_every_class_and_variant_loads_as_remote_code_in_one_fresh_interpreter(tmp_path):
    """All classes and config variants in one interpreter without hf_lm: forward (every output tensor),
    greedy and beam search (and Mask-Predict's iterations) from the folder's own code give the in-process
    model's outputs."""
    remote = RemoteCode(tmp_path)
    for name, model, auto, checks in variant_models():
        folder = remote.save(model, name)
        for inputs, search in checks:
            remote.expect(folder, auto, model, inputs, generate=search)
    for case in FAMILY_CASES + VARIANT_CASES:
        model, batch = case.make_model(), case.make_batch()
        folder = remote.save(model, case.name)
        auto = AUTO_CLASS[case.model_class]
        remote.expect(folder, auto, model, batch)
        if case.generates:
            for beams in (1, 2):
                search = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=beams)
                remote.expect(folder, auto, model, case.prompt(batch), generate=search)
    remote.run()


# ---------------------------------------------------------------- generation


def _generate_output(model, prompt, **kwargs):
    """generate()'s output of 4 greedy tokens, their logits included."""
    return model.generate(
        **prompt,
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        **kwargs,
    )


def _generate(model, prompt, **kwargs):
    out = _generate_output(model, prompt, **kwargs)
    return out.sequences, torch.stack(out.logits)


@pytest.mark.parametrize("beams", [1, 2], ids=["greedy", "beam"])
@pytest.mark.parametrize("case", cases(GENERATING))
def test_cached_generation_equals_uncached(case, beams):
    model, prompt = case.make_model(), case.prompt(case.make_batch())
    tokens, logits = _generate(model, prompt, num_beams=beams, use_cache=True)
    tokens_uncached, logits_uncached = _generate(model, prompt, num_beams=beams, use_cache=False)
    assert torch.equal(tokens, tokens_uncached)
    torch.testing.assert_close(logits, logits_uncached, atol=1e-5, rtol=1e-5)


CACHED = [case for case in GENERATING if case.name not in ("ffnn-causal-lm", "ngram-causal-lm")]


def _next_step(case, model) -> tuple[dict, object]:
    """A prompt's prefill with `use_cache`: the inputs of the next decoding step and the cache."""
    prompt = case.prompt(case.make_batch())
    if model.config.is_encoder_decoder:
        start = torch.full((prompt["input_ids"].shape[0], 1), model.generation_config.decoder_start_token_id)
        out = model(**prompt, decoder_input_ids=start, use_cache=True)
        step = dict(prompt, decoder_input_ids=out.logits[:, -1:].argmax(-1))
    else:
        out = model(**prompt, use_cache=True)
        mask = prompt["attention_mask"]
        step = dict(
            input_ids=out.logits[:, -1:].argmax(-1), attention_mask=torch.cat([mask, mask[:, -1:]], dim=1)
        )
    assert CACHE_NAME in out, f"the cache is not returned as `{CACHE_NAME}`"
    return step, output_cache(out)


@pytest.mark.parametrize("case", cases(GENERATING))
def test_generate_returns_each_steps_hidden_states_where_forward_has_them(case):
    """`generate(output_hidden_states=True, return_dict_in_generate=True)` gives one tuple of hidden
    states per new token, the layers' forward returns (none for the count-based n-gram model)."""
    model, batch = case.make_model(), case.make_batch()
    key = "decoder_hidden_states" if model.config.is_encoder_decoder else "hidden_states"
    with torch.no_grad():
        layers = getattr(model(**inputs_only(case, batch), output_hidden_states=True), key)
    steps = getattr(_generate_output(model, case.prompt(batch), output_hidden_states=True), key)
    assert len(steps) == 4
    if layers is None:
        assert case.name == "ngram-causal-lm" and all(step is None for step in steps), steps
        return
    for step in steps:
        assert step is not None and len(step) == len(layers), step
        assert all(torch.is_tensor(h) and h.shape[-1] == layer.shape[-1] for h, layer in zip(step, layers))


@pytest.mark.parametrize("case", cases(CACHED))
def test_the_cache_is_taken_under_both_of_its_names(case):
    model = case.make_model().eval()
    logits = {}
    for name in ("past_key_values", "cache"):
        step, cache = _next_step(case, model)
        logits[name] = model(**step, **{name: cache}).logits
    torch.testing.assert_close(logits["cache"], logits["past_key_values"], atol=0, rtol=0)
    step, cache = _next_step(case, model)
    with pytest.raises(ValueError, match="`cache` or as `past_key_values`, not both"):
        model(**step, cache=cache, past_key_values=cache)


STATIC = STATIC_CACHE_CASES


def test_the_static_cache_families_are_the_attention_families():
    assert {case.name for case in STATIC} == {
        "gpt-causal-lm",
        "t5-seq2seq-lm",
        "bart-seq2seq-lm",
        "gpt-moe-causal-lm",
        "t5-moe-seq2seq-lm",
    }


@pytest.mark.parametrize("beams", [1, 2], ids=["greedy", "beam"])
@pytest.mark.parametrize("case", cases(STATIC))
def test_static_cache_generation_equals_dynamic(case, beams):
    model, prompt = case.make_model(), case.prompt(case.make_batch())
    tokens, logits = _generate(model, prompt, num_beams=beams)
    tokens_static, logits_static = _generate(model, prompt, num_beams=beams, cache_implementation="static")
    assert torch.equal(tokens, tokens_static)
    torch.testing.assert_close(logits, logits_static, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- padding


def _alone(batch: dict, row: int) -> dict:
    """Row `row` of a batch as a batch of one, its padding removed (each mask removes its own inputs')."""
    source = batch["attention_mask"][row].reshape(-1, batch["attention_mask"].shape[-1])[0].bool()
    target = batch.get("decoder_attention_mask")
    target = target[row].bool() if target is not None else None
    alone = {}
    for key, value in batch.items():
        keep = target if key.startswith("decoder_") else source
        alone[key] = value[row : row + 1][..., keep]
    return alone, source, target


def _other_side(batch: dict) -> dict:
    """The batch with row 1's source padding moved to the other side (its tokens rolled past it)."""
    T = batch["attention_mask"].shape[-1]
    mask = batch["attention_mask"][1].reshape(-1, T)[0]
    pads = int((mask == 0).sum())
    shift = pads if bool(mask[0]) else -pads  # right padding to the left, or left to the right
    out = dict(batch)
    for key, value in batch.items():
        if not key.startswith("decoder_") and value.dim() >= 2 and value.shape[-1] == T:
            out[key] = value.clone()
            out[key][1] = value[1].roll(shift, dims=-1)
    return out


@pytest.mark.parametrize("side", ["built", "other"], ids=["padded", "padded-other-side"])
@pytest.mark.parametrize("case", cases())
def test_a_padded_row_gives_what_it_gives_alone(case, side):
    """Every output of the padded row 1 (at its real positions) equals that of the row alone, padded as
    the case pads it (left for decoder-only models, right for encoders) or on the other side (a
    tokenizer's `padding_side` is the user's: a BERT classifier must pool its [CLS], not a pad)."""
    model = case.make_model()
    batch = inputs_only(case, case.make_batch())
    if side == "other":
        batch = _other_side(batch)
    alone, source, target = _alone(batch, 1)
    with torch.no_grad():
        padded, single = tensors(model(**batch)), tensors(model(**alone))
    assert padded.keys() == single.keys() and padded
    for key, value in padded.items():
        row = value[1]
        if row.dim() and row.shape != single[key][0].shape:  # a sequence dimension: keep the real positions
            keep = source if row.shape[0] == source.numel() else target
            row = row[keep]
        torch.testing.assert_close(row, single[key][0], atol=1e-5, rtol=1e-4, msg=key)


@pytest.mark.parametrize("case", cases(GENERATING))
def test_a_padded_prompt_generates_what_it_generates_alone(case):
    model, prompt = case.make_model(), case.prompt(case.make_batch())
    alone, _, _ = _alone(prompt, 1)
    tokens, _ = _generate(model, prompt)
    tokens_alone, _ = _generate(model, alone)
    new = (
        tokens_alone.shape[1] if model.config.is_encoder_decoder else 4
    )  # a decoder-only output has the prompt
    assert torch.equal(tokens[1, -new:], tokens_alone[0, -new:])


# ---------------------------------------------------------------- embeddings and features


RESIZABLE = [case for case in FAMILY_CASES if case.name != "ngram-causal-lm"]  # counts, no embeddings


@pytest.mark.parametrize("case", cases(RESIZABLE))
def test_resize_token_embeddings_keeps_forward_working(case):
    model, batch = case.make_model(), case.make_batch()
    with torch.no_grad():
        before = tensors(model(**batch))
    model.resize_token_embeddings(VOCAB + 8, mean_resizing=False)
    assert model.config.vocab_size == VOCAB + 8
    new_id = batch["input_ids"].clone()
    new_id[(0,) * (new_id.dim() - 1) + (-1,)] = VOCAB + 5  # an id that exists only after resizing
    with torch.no_grad():
        after = tensors(model(**{**batch, "input_ids": new_id}))
    for key, value in before.items():
        vocab_sized = value.shape[-1] == VOCAB and "logits" in key
        expected = (*value.shape[:-1], VOCAB + 8) if vocab_sized else value.shape
        assert after[key].shape == expected, key
        assert torch.isfinite(after[key]).all(), key


BARE = [case for case in FAMILY_CASES if AUTO_CLASS[case.model_class] == "AutoModel"]


def test_every_family_has_a_bare_model():
    assert {case.name for case in BARE} == {
        "gpt",
        "bert",
        "electra",
        "t5",
        "bart",
        "rnn",
        "rnn-seq2seq",
        "ffnn",
    }


@pytest.mark.parametrize("case", cases(BARE))
def test_feature_extraction_from_input_ids_alone(case):
    """What the feature-extraction pipeline calls: `AutoModel(input_ids, attention_mask)`. As in
    transformers' BartModel, the T5/BART decoder then reads the ids shifted right (under the source's
    padding mask shifted with them: the start token is real); the RNN encoder-decoder refuses with a
    ValueError that says what to pass."""
    model, batch = case.make_model().eval(), case.make_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if case.name == "rnn-seq2seq":
        with pytest.raises(ValueError, match="decoder_input_ids"):
            model(input_ids=ids, attention_mask=mask)
        return
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert hidden.shape[:2] == ids.shape and torch.isfinite(hidden).all()
    if case.name in ("t5", "bart"):
        config = model.config
        assert bool(mask[:, 0].all()), "right padding (left: test_a_padded_row_gives_what_it_gives_alone)"
        shifted = shift_tokens_right(ids, config.pad_token_id, config.decoder_start_token_id)
        shifted_mask = torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1)
        explicit = model(
            input_ids=ids, attention_mask=mask, decoder_input_ids=shifted, decoder_attention_mask=shifted_mask
        ).last_hidden_state
        torch.testing.assert_close(hidden, explicit, rtol=0, atol=0)


# ---------------------------------------------------------------- outputs and losses


def _first_tokens(case, batch: dict, n: int) -> dict:
    """Row 0's first `n` tokens (row 0 is never padded), so a head projects 1 x n rows (x choices)."""
    return {k: v[:1, ..., :n] for k, v in inputs_only(case, batch).items() if v.dim() >= 2}


@pytest.mark.parametrize("case", cases())
def test_logits_are_contiguous_for_every_batch_size(case):
    model, batch = case.make_model(), case.make_batch()
    for n in (1, 2, 3, 4, 5):
        with torch.no_grad():
            out = model(**_first_tokens(case, batch, n))
        for key, value in tensors(out).items():
            if "logits" in key:
                assert value.is_contiguous(), (key, n, value.stride())


TOKEN_LOSSES = [
    case
    for case in FAMILY_CASES
    if "labels" in case.make_batch()
    and case.make_batch()["labels"].dim() >= 2
    and "pretraining" not in case.name
]


def test_token_losses_cover_every_token_level_head():
    assert {case.name for case in TOKEN_LOSSES} == {
        "gpt-causal-lm",
        "bert-mlm",
        "bert-token-cls",
        "electra-mlm",
        "electra-token-cls",
        "t5-seq2seq-lm",
        "bart-seq2seq-lm",
        "t5-mask-predict",
        "bart-mask-predict",
        "rnn-causal-lm",
        "rnn-seq2seq-lm",
        "ngram-causal-lm",
        "ffnn-causal-lm",
        "gpt-moe-causal-lm",
        "t5-moe-seq2seq-lm",
    }


@pytest.mark.parametrize("case", cases(TOKEN_LOSSES))
def test_num_items_in_batch_turns_the_mean_into_a_sum_over_it(case):
    """With `num_items_in_batch=N` the loss is the sum of the token losses / N (transformers' Trainer
    passes the count over all accumulated micro-batches, so accumulation equals one big batch)."""
    model, batch = case.make_model(), case.make_batch()
    assert "kwargs" in inspect.signature(model.forward).parameters
    labels = batch["labels"]
    if case.model_class.__name__.endswith("ForCausalLM"):
        labels = labels[:, 1:]  # the model shifts: the first token predicts nothing
    count = int((labels != -100).sum())
    with torch.no_grad():
        mean = model(**batch).loss
        for n in (count, 3 * count, 7):
            loss = model(**batch, num_items_in_batch=torch.tensor(n)).loss
            torch.testing.assert_close(loss * n, mean * count, atol=1e-5, rtol=1e-5, msg=f"{n}")


CAUSAL_LMS = [case for case in FAMILY_CASES if case.model_class.__name__.endswith("ForCausalLM")]


@pytest.mark.parametrize("case", cases(CAUSAL_LMS))
def test_shift_labels_are_scored_as_they_are(case):
    """`shift_labels` (transformers' name for targets aligned with the positions, as nanoGPT's `(x, y)`
    windows are; the training loop's random windows pass them) score every position against them
    unshifted; `labels` shifted by hand into `shift_labels` give the `labels` loss; bad ones are named."""
    model, batch = case.make_model().eval(), case.make_batch()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    targets = torch.roll(batch["input_ids"], -1, dims=1)  # any ids: each position's own target
    with torch.no_grad():
        logits = model(**inputs).logits
        loss = model(**inputs, shift_labels=targets).loss
        expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
        shifted = torch.nn.functional.pad(batch["labels"], (0, 1), value=-100)[:, 1:]
        by_hand = model(**inputs, shift_labels=shifted).loss
        torch.testing.assert_close(by_hand, model(**batch).loss, atol=1e-6, rtol=1e-6)
        with pytest.raises(ValueError, match="`shift_labels` contains"):
            model(**inputs, shift_labels=targets + VOCAB)


# ---------------------------------------------------------------- training


TRAINED = [case for case in FAMILY_CASES if any(key in case.make_batch() for key in TARGETS)]


@pytest.mark.parametrize("case", cases(TRAINED))
def test_every_parameter_learns_from_the_loss(case):
    """In training mode the loss reaches every parameter with a finite, non-zero gradient: a `detach()`,
    a head the loss bypasses or a module built and never called shows up here naming the parameter.
    (Parity of the gradients themselves with transformers: tests/test_training_parity.py.)

    Exempt: an expert that no token of the tiny batch was routed to (its gradient is exactly 0), the
    n-gram model, whose counts are fitted rather than trained (no parameter requires a gradient), and a
    multiple-choice head's bias: it adds the same number to every choice's score, which the softmax over
    the choices cancels, so its true gradient is 0 (the float one is 0 or rounding noise, by CPU)."""
    model, batch = case.make_model().train(), case.make_batch()
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    if not params:
        assert case.name == "ngram-causal-lm", "only the count-based n-gram model has nothing to train"
        return
    model(**batch).loss.backward()
    shift_invariant = {"classifier.bias"} if case.name.endswith("multiple-choice") else set()
    for name, p in params.items():
        assert p.grad is not None, f"{name}: the loss does not reach it"
        assert p.grad.isfinite().all(), f"{name}: a non-finite gradient"
        if name in shift_invariant:
            assert p.grad.abs().max() < 1e-6, f"{name}: a softmax over the choices cancels it"
            continue
        assert p.grad.any() or ".experts." in name, f"{name}: a gradient of exactly 0"


CHECKPOINTED = [case for case in TRAINED if case.model_class.supports_gradient_checkpointing]


def test_activation_checkpointing_covers_the_transformer_families():
    families = {case.name.split("-")[0] for case in CHECKPOINTED}
    assert families == {"gpt", "bert", "electra", "t5", "bart"}


@pytest.mark.parametrize("reentrant", [False, True], ids=["default", "reentrant"])
@pytest.mark.parametrize("case", cases(CHECKPOINTED))
def test_activation_checkpointing_gives_the_same_loss_and_gradients(case, reentrant):
    """Recomputing the blocks in the backward pass (`gradient_checkpointing_enable()`) changes memory,
    not training: the same loss and gradients, dropout included (the recomputation must replay the
    RNG), and every block's modules really run twice (once forward, once recomputed; transformers
    checkpoints a block's `forward`, so the block's own hooks run once). Also with torch's reentrant
    checkpoint (what PEFT's k-bit preparation asks for), which gives gradients only to tensors a
    block takes positionally: the encoder states, T5's learned position bias in the masks."""
    config = case.make_config()
    config.hidden_dropout = config.attention_dropout = 0.1  # the recomputed forward must draw the same masks
    torch.manual_seed(0)
    model, batch = case.model_class(config).train(), case.make_batch()
    blocks = [
        m for m in model.modules() if isinstance(m, transformers.modeling_layers.GradientCheckpointingLayer)
    ]
    assert blocks, "no block can be checkpointed"
    calls = []  # one entry per call of a module inside a block: that block
    for block in blocks:
        for child in block.children():
            child.register_forward_pre_hook(lambda module, args, block=block: calls.append(block))
    # a decoder asked to cache must not cache under checkpointing (the recomputation would append twice)
    extra = {"use_cache": True} if case.generates else {}
    runs, counts = [], []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        model.zero_grad()
        calls.clear()
        torch.manual_seed(0)
        loss = model(**batch, **extra).loss
        loss.backward()
        counts.append([sum(c is block for c in calls) for block in blocks])
        runs.append(
            (loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        )
    assert all(n > 0 for n in counts[0]) and counts[1] == [2 * n for n in counts[0]], counts
    (plain_loss, plain), (loss, grads) = runs
    with torch.no_grad():
        assert not torch.equal(model.eval()(**batch).loss, plain_loss), "dropout is not active"
    torch.testing.assert_close(loss, plain_loss)
    assert grads.keys() == plain.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, plain[name], msg=name)


# ---------------------------------------------------------------- dtype moves


@pytest.mark.parametrize("case", cases())
def test_float64_outputs_equal_float32_outputs(case):
    model, batch = case.make_model(), case.make_batch()
    with torch.no_grad():
        expected = tensors(model(**batch))
        model.to(torch.float64)
        got = tensors(model(**batch))
    has_weights = any(p.is_floating_point() for p in model.parameters())  # the n-gram model has counts only
    for key, value in expected.items():
        if value.is_floating_point():
            assert got[key].dtype == (torch.float64 if has_weights else value.dtype), key
            torch.testing.assert_close(got[key].float(), value, atol=1e-5, rtol=1e-4, msg=key)


@pytest.mark.parametrize("case", cases(GENERATING))
def test_a_generating_head_lists_generation_mixin_among_its_own_bases(case):
    """transformers (and its `test_inherits_generation_mixin`) look for `GenerationMixin` in the
    head's own `__bases__`, not further up its MRO."""
    assert transformers.GenerationMixin in case.model_class.__bases__
    assert case.model_class.can_generate()


def _is_encoder_field(key: str) -> bool:
    # transformers' GenerationTesterMixin takes such a key as the mark of an encoder-decoder
    return key.startswith("encoder") and key != "encoder_no_repeat_ngram_size"


def _is_decoder_field(key: str) -> bool:
    return key.startswith("decoder") or key in ("sliding_window", "num_decoder_layers")


CONFIG_CASES: dict = {}
for _case in FAMILY_CASES:  # one case per config class
    CONFIG_CASES.setdefault(type(_case.make_config()), _case)
CONFIG_CASES = list(CONFIG_CASES.values())


@pytest.mark.parametrize("case", cases(CONFIG_CASES))
def test_a_config_holds_only_its_own_kind_of_fields(case):
    """A decoder-only config has no encoder field, an encoder no decoder field; an encoder-decoder
    may have both. Generic tools tell the kind of a model from these keys."""
    config = case.make_config()
    keys = set(config.to_dict())
    if config.is_encoder_decoder:
        return
    assert not {k for k in keys if _is_encoder_field(k)}, type(config).__name__
    generates = any(c.generates for c in FAMILY_CASES if c.make_config().__class__ is type(config))
    if not generates:  # an encoder: no decoder fields either
        assert not {k for k in keys if _is_decoder_field(k)}, type(config).__name__


@pytest.mark.parametrize("case", cases(FAMILY_CASES + VARIANT_CASES))
def test_the_parameter_estimate_never_exceeds_the_model(case):
    """The estimate a model is refused by when it cannot fit in memory (`check_fits_in_memory`) is a
    lower bound: a model exactly as large as its weights is never refused."""
    config = case.make_config()
    if not hasattr(config, "estimated_num_parameters"):
        assert case.name.startswith("ngram"), "only the count-based n-gram model has no weights to estimate"
        return
    assert 0 < config.estimated_num_parameters() <= case.make_model().num_parameters()
