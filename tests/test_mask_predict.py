"""Mask-Predict (Ghazvininejad et al., 2019): the conditional masked LM heads of T5/BART, their loss,
their length head and `generate()`'s refinement iterations, checked against a brute-force
re-implementation of the algorithm on a model whose predictions are fixed functions of its input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBartForMaskPredict,
    HfLmBartModel,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
)
from hf_lm.testing import FAMILY_CASES

CASES = [case for case in FAMILY_CASES if case.name.endswith("mask-predict")]
MASK = 1  # the cases' mask_token_id
PAD = 0


def _source():
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(3, 64, (3, 7), generator=gen)
    mask = torch.ones_like(src)
    mask[1, 4:] = 0
    return src.masked_fill(mask == 0, PAD), mask


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(decoder_attention="full"), "decoder_attention"),
        (dict(decoder_attention=None), "decoder_attention"),
        (dict(mask_token_id=64), "mask_token_id"),
        (dict(mask_token_id=-1), "mask_token_id"),
    ],
)
def test_bad_config_values_name_their_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        HfLmBartConfig(vocab_size=64, hidden_size=16, num_attention_heads=2, **kwargs)


def test_each_head_refuses_the_other_decoder():
    small = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    with pytest.raises(ValueError, match="decoder_attention"):
        HfLmBartForMaskPredict(HfLmBartConfig(**small, mask_token_id=MASK))  # causal by default
    with pytest.raises(ValueError, match="mask_token_id"):
        HfLmBartForMaskPredict(HfLmBartConfig(**small, decoder_attention="bidirectional"))
    for config_class, head in (
        (HfLmBartConfig, HfLmBartForConditionalGeneration),
        (HfLmT5Config, HfLmT5ForConditionalGeneration),
    ):
        with pytest.raises(ValueError, match="decoder_attention"):
            head(config_class(**small, decoder_attention="bidirectional", mask_token_id=MASK))


def test_default_decoder_stays_causal_and_the_bidirectional_one_sees_the_future():
    """Changing the last target token moves earlier positions' outputs only in a bidirectional decoder."""
    base = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, hidden_dropout=0.0)
    src, mask = _source()
    target = torch.randint(3, 64, (3, 5), generator=torch.Generator().manual_seed(2))
    changed = target.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 61 + 3
    for attention, moves in (("causal", False), ("bidirectional", True)):
        torch.manual_seed(0)
        model = HfLmBartModel(HfLmBartConfig(**base, decoder_attention=attention)).eval()
        with torch.no_grad():
            a, b = (
                model(src, mask, decoder_input_ids=t).last_hidden_state[:, :-1] for t in (target, changed)
            )
        assert (not torch.allclose(a, b)) is moves, attention


# ---------------------------------------------------------------- the loss and the length head


@pytest.mark.parametrize("eps", [0.0, 0.1], ids=["plain", "smoothed"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_loss_is_the_masked_tokens_and_the_length_by_hand(case, eps):
    """The CMLM loss, its token term with `label_smoothing` ε: (1 - ε) of the target's cross-entropy
    and ε of the uniform distribution's, as transformers' `LabelSmoother`."""
    model, batch = case.make_model(), case.make_batch()
    model.label_smoothing = eps
    out = model(**batch)
    B, T = batch["labels"].shape
    assert out.logits.shape == (B, T, 64)
    assert out.length_logits.shape == (B, model.config.max_position_embeddings + 1)
    total, count = 0.0, 0
    for b in range(B):  # by hand: log-softmax per masked position, the length's log-softmax per row
        for t in range(T):
            if batch["labels"][b, t] != -100:
                logp = out.logits[b, t].double().log_softmax(-1)
                total -= (1 - eps) * logp[batch["labels"][b, t]] + eps * logp.mean()
                count += 1
        total -= 0.1 * out.length_logits[b].double().log_softmax(-1)[batch["length_labels"][b]]
    torch.testing.assert_close(out.loss.double(), total / count, rtol=1e-5, atol=1e-6)
    # without length labels only the token loss is left (the same count)
    tokens_only = model(**{k: v for k, v in batch.items() if k != "length_labels"}).loss
    torch.testing.assert_close(
        tokens_only,
        F.cross_entropy(out.logits.flatten(0, 1), batch["labels"].flatten(), label_smoothing=eps),
    )


def test_trainer_label_smoothing_smooths_the_tokens_and_keeps_the_length_loss(tmp_path):
    """transformers' `label_smoothing_factor` removes `labels` and scores `logits` alone: with the
    model's length loss dropped, the length head would never train. The model refuses `length_labels`
    without `labels`, and `MaskPredictTrainer` gives the factor to the model's own loss instead."""
    from training.finetune_translation import MaskPredictTrainer, TranslationTrainingArguments

    case = CASES[0]
    model, batch = case.make_model(), case.make_batch()
    with pytest.raises(ValueError, match="label_smoothing"):
        model(**{k: v for k, v in batch.items() if k != "labels"})
    args = TranslationTrainingArguments(
        output_dir=str(tmp_path),
        label_smoothing_factor=0.1,
        eval_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    trainer = MaskPredictTrainer(model=model, args=args)
    assert trainer.label_smoother is None and model.label_smoothing == 0.1
    model.train()
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    assert model.length_head.weight.grad.abs().sum() > 0  # the length loss is in
    with torch.no_grad():
        model.label_smoothing = 0.0
        assert not torch.allclose(loss, model(**batch).loss)  # and the tokens are smoothed


def test_bad_length_labels_and_missing_decoder_inputs_raise():
    case = CASES[1]
    model, batch = case.make_model(), case.make_batch()
    for bad, match in (
        (torch.tensor([1]), "a \\(2,\\) tensor"),
        (torch.tensor([1.0, 2.0]), "integer"),
        (torch.tensor([1, 99]), "in \\[0"),
    ):
        with pytest.raises(ValueError, match=match):
            model(**{**batch, "length_labels": bad})
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model(input_ids=batch["input_ids"], labels=batch["labels"])


# ---------------------------------------------------------------- generate() against a brute force


class FixedPredictions:
    """A stand-in for the decoder: position i's logits are A[i] + Bn[next token] (Bn[END] at the last
    real position), so a re-predicted token depends on its neighbour and the iterations matter."""

    def __init__(self, vocab: int, positions: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        self.A = 2 * torch.randn(positions, vocab, generator=gen)
        self.Bn = 2 * torch.randn(vocab + 1, vocab, generator=gen)  # row `vocab`: END
        self.vocab = vocab

    def logits(self, row: list[int]) -> torch.Tensor:
        """(l, V) logits of one target `row` of l tokens (masks included)."""
        nxt = row[1:] + [self.vocab]
        return torch.stack([self.A[i] + self.Bn[n] for i, n in enumerate(nxt)])

    def log_probs(self, row: list[int]) -> torch.Tensor:
        logits = self.logits(row).double()
        logits[:, [PAD, MASK]] = -math.inf  # the model never predicts padding or the mask
        return logits.log_softmax(-1)

    def patch(self, model):
        """Replace the model's `_predict` (N, L) tokens -> (N, L, V) log-probs by these predictions."""

        def predict(states, source_mask, tokens, target_mask):
            out = torch.zeros(*tokens.shape, self.vocab, dtype=torch.float32)
            for n, (row, keep) in enumerate(zip(tokens.tolist(), target_mask.tolist())):
                length = sum(keep)
                out[n, :length] = self.log_probs(row[:length]).float()
            return out

        model._predict = predict


def mask_predict_brute_force(fixed, length_logits, T: int, beam: int, max_len: int):
    """Ghazvininejad et al.'s algorithm with Python lists, one source (its (N + 1,) length logits)."""
    scores = length_logits.tolist()
    lengths = sorted(range(1, max_len + 1), key=lambda n: -scores[n])[:beam]
    best = None
    for length in lengths:
        tokens, conf = [MASK] * length, [0.0] * length
        for t in range(T):
            n = length if t == 0 else length * (T - t) // T
            masked = sorted(range(length), key=lambda i: (conf[i], i))[:n] if t else list(range(length))
            for i in masked:
                tokens[i] = MASK
            logp = fixed.log_probs(tokens).float()
            for i in masked:
                conf[i], tokens[i] = (float(v) for v in logp[i].max(-1))
                tokens[i] = int(tokens[i])
        avg = sum(conf) / length
        if best is None or avg > best[0]:
            best = (avg, tokens)
    return best[1]


@pytest.mark.parametrize("T, beam", [(1, 1), (2, 1), (4, 3), (10, 2)])
def test_generate_is_mask_predict_step_by_step(T, beam):
    case = CASES[1]
    model = case.make_model()
    src, mask = _source()
    fixed = FixedPredictions(64, 33, seed=T)
    fixed.patch(model)
    gen = torch.Generator().manual_seed(T)
    length_logits = torch.randn(3, 33, generator=gen)
    model.length_logits = lambda states, attention_mask: length_logits
    out = model.generate(
        src, mask, num_iterations=T, length_beam=beam, max_new_tokens=9, return_dict_in_generate=True
    )
    for b in range(3):
        expected = mask_predict_brute_force(fixed, length_logits[b], T, beam, max_len=9)
        length = len(expected)
        assert out.lengths[b] == length
        row = out.sequences[b].tolist()
        assert row[: length + 2] == [
            model.config.decoder_start_token_id,
            *expected,
            model.config.eos_token_id,
        ]
        assert set(row[length + 2 :]) <= {PAD}
    # the trace: iteration 0 masks every token; iteration t re-masks L·(T−t)/T; only those change
    masked, tokens = out.iteration_masked, out.iteration_tokens
    assert masked.shape == tokens.shape == (T, 3, out.lengths.max())
    for t in range(T):
        counts = out.lengths if t == 0 else out.lengths * (T - t) // T
        assert masked[t].sum(-1).tolist() == counts.tolist()
        if t:
            assert torch.equal(tokens[t][~masked[t]], tokens[t - 1][~masked[t]])


def test_lowest_confidence_breaks_ties_leftmost_and_skips_padding():
    from hf_lm.models.hflm_seq2seq_mask_predict import lowest_confidence

    log_probs = torch.tensor([[-1.0, -3.0, -1.0, -3.0, -9.0], [-0.5, -0.5, -0.5, -0.1, -0.2]])
    real = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool()
    got = lowest_confidence(log_probs, real, torch.tensor([3, 2]))
    assert got.int().tolist() == [[1, 1, 0, 1, 0], [1, 1, 0, 0, 0]]


# ---------------------------------------------------------------- a real tiny model


@pytest.mark.parametrize("case", CASES, ids=str)
def test_generate_with_a_tiny_model(case):
    model = case.make_model()
    src, mask = _source()
    cfg = model.config
    one = model.generate(src, mask, num_iterations=1, max_new_tokens=6, return_dict_in_generate=True)
    # iteration 0 is the argmax of one forward pass over an all-mask target of the predicted length
    for b in range(3):
        length = int(one.lengths[b])
        with torch.no_grad():
            out = model(src[b : b + 1], mask[b : b + 1], decoder_input_ids=torch.full((1, length), MASK))
        logits = out.logits[0]
        logits[:, [cfg.pad_token_id, MASK]] = -math.inf
        assert one.sequences[b, 1 : length + 1].tolist() == logits.argmax(-1).tolist()
        assert int(out.length_logits[0, 1:7].argmax()) + 1 == length
    four = model.generate(src, mask, num_iterations=4, length_beam=3, max_new_tokens=6)
    assert torch.equal(four, model.generate(src, mask, num_iterations=4, length_beam=3, max_new_tokens=6))
    assert four[:, 0].eq(cfg.decoder_start_token_id).all()
    body = four[:, 1:]
    assert not body.eq(MASK).any() and (body == cfg.eos_token_id).sum(-1).eq(1).all()
    # a batch gives what each source gives alone (padding of the source and of the targets)
    for b in range(3):
        real = mask[b].bool()
        alone = model.generate(src[b : b + 1, real], num_iterations=4, length_beam=3, max_new_tokens=6)
        assert alone[0].tolist() == four[b, : alone.shape[1]].tolist()
    with pytest.raises(ValueError, match="num_iterations"):
        model.generate(src, mask, num_iterations=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(src, mask, max_new_tokens=cfg.max_position_embeddings + 1)


def test_auto_model_for_masked_lm_loads_the_mask_predict_head(tmp_path):
    """In process; iterative decoding from the folder's own code: tests/test_model_properties.py."""
    model = CASES[1].make_model()
    model.save_pretrained(tmp_path)
    assert type(AutoModelForMaskedLM.from_pretrained(tmp_path)) is type(model)


# ---------------------------------------------------------------- the CMLM objective in training


def test_cmlm_mask_counts_are_uniform_between_one_and_the_length():
    from training.data.seq2seq_noise import cmlm_mask

    rng = np.random.default_rng(0)
    counts = np.array([cmlm_mask(5, rng).sum() for _ in range(5000)])
    assert set(counts.tolist()) == {1, 2, 3, 4, 5}
    np.testing.assert_allclose(np.bincount(counts)[1:] / 5000, 0.2, atol=0.02)
    positions = np.stack([cmlm_mask(5, rng) for _ in range(5000)]).mean(0)  # each position equally often
    np.testing.assert_allclose(positions, 0.6, atol=0.03)  # E[n] / L = 3 / 5
    assert cmlm_mask(0, rng).shape == (0,)


def test_collator_masks_targets_and_gives_labels_and_lengths():
    from transformers import BertTokenizer

    from training.data.collators_seq2seq import DataCollatorForMaskPredict

    vocab = ["<pad>", "<s>", "</s>", "<unk>", "<mask>", *"abcdefgh"]
    tokenizer = BertTokenizer(
        vocab={w: i for i, w in enumerate(vocab)},
        pad_token="<pad>",
        eos_token="</s>",
        mask_token="<mask>",
        unk_token="<unk>",
    )
    features = [
        {"input_ids": [5, 6, 7, 2], "labels": [8, 9, 10, 11, 2]},
        {"input_ids": [5, 2], "labels": [9, 10, 2]},
    ]
    batch = DataCollatorForMaskPredict(tokenizer, seed=0)(features)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 2], [5, 2, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["length_labels"].tolist() == [4, 2]  # the EOS is dropped: generate() appends it
    assert batch["decoder_attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    targets = torch.tensor([[8, 9, 10, 11], [9, 10, 0, 0]])
    masked = batch["decoder_input_ids"] == 4
    assert masked.any(dim=1).all() and not masked[1, 2:].any()
    assert torch.equal(batch["decoder_input_ids"][~masked], targets[~masked])
    assert torch.equal(batch["labels"][masked], targets[masked]) and batch["labels"][~masked].eq(-100).all()
    again = DataCollatorForMaskPredict(tokenizer, seed=0)(features)
    assert all(torch.equal(batch[k], again[k]) for k in batch)


@pytest.mark.slow
def test_copy_task_trains_and_decodes_through_finetune_translation(tmp_path):
    """`training.finetune_translation --objective mask_predict` on a copy task (source == target):
    collator, CMLM loss, length head, Mask-Predict decoding in evaluation and the saved folder.

    Learning to copy is a phase transition: the loss sits on the unigram plateau (~3.1) until the
    cross-attention aligns target and source positions, then falls to ~0 within ~100 steps. A
    2+2-layer, 64-wide BART-style model (learned positions, normalized embeddings) crosses it after
    175-375 of the 750 steps (10 epochs of 1,200 pairs) over seeds 0-7 and other CPU kernels
    (conftest); test BLEU 80-100, ~0 untrained. The "transformer" preset (sinusoidal positions,
    scaled embeddings) crossed it only after 525-850 steps, at the edge of its 900, and failed on
    other CPUs. About 12 s on one core: no evaluation during training (the final validation and
    test decode with Mask-Predict)."""
    from test_finetune_translation import _toy_parallel

    from training.finetune_translation import finetune, parse_args

    data = tmp_path / "data"
    data.mkdir()
    _toy_parallel(data, 1200, seed=0)
    _toy_parallel(data, 60, seed=1, stem="val")
    _toy_parallel(data, 100, seed=2, stem="test")
    args = parse_args(
        [
            "--data_dir", str(data), "--source_lang", "xx", "--target_lang", "yy",
            "--from_scratch", "--family", "bart", "--objective", "mask_predict", "--vocab_size", "400",
            "--hidden_size", "64", "--num_hidden_layers", "2", "--num_attention_heads", "4",
            "--intermediate_size", "128", "--hidden_dropout", "0", "--output_dir", str(tmp_path / "out"),
            "--num_train_epochs", "10", "--per_device_train_batch_size", "16", "--learning_rate", "2e-3",
            "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", "20",
            "--generation_max_length", "24", "--mask_predict_iterations", "4", "--mask_predict_length_beam", "3",
            "--logging_steps", "50", "--eval_strategy", "no", "--save_strategy", "no", "--disable_tqdm", "true",
            "--seed", "0",
        ]
    )  # fmt: skip
    metrics = finetune(*args)
    assert metrics["test_bleu"] > 60 and "test_greedy_bleu" not in metrics, metrics
    card = (tmp_path / "out" / "final" / "README.md").read_text()  # it said "beam 5", the unused default
    assert "Mask-Predict, 4 iterations, 3 length candidates, max length 24" in card and "beam 5" not in card
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "out" / "final", trust_remote_code=True)
    assert (
        type(model).__name__ == "HfLmBartForMaskPredict" and model.config.decoder_attention == "bidirectional"
    )


def test_generate_on_a_simulated_accelerator_equals_the_cpu():
    """Every tensor Mask-Predict makes follows the model's device (tests/simulated_device.py). BART:
    T5's decoder, reading all-mask targets with relative positions only, gives every position the
    same state at iteration 0, so its length candidates tie and 1-ulp differences pick among them."""
    from simulated_device import simulated_device, to_cpu

    case = CASES[1]
    model = case.make_model()
    src, mask = _source()
    kwargs = dict(num_iterations=3, length_beam=2, max_new_tokens=6, return_dict_in_generate=True)
    expected = model.generate(src, mask, **kwargs)
    with simulated_device() as sim:
        model.to(sim.device)
        out = model.generate(src.to(sim.device), mask.to(sim.device), **kwargs)
        assert out.sequences.device == sim.device and sim.ops > 100
    for key, value in expected.items():  # tokens exactly; probabilities to rounding (CPU-only kernels)
        torch.testing.assert_close(to_cpu(out[key]), value, atol=1e-5, rtol=1e-5, msg=key)
