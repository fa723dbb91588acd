"""The recurrent encoder-decoder with attention (`hflm_rnn_seq2seq`): config, attention invariants,
loss, generation with and without the recurrent cache, scheduled sampling, Trainer, pipeline,
saving and the remote-code round trip, the alignment plot, and learning toy copy/reverse tasks."""

import json

import pytest
import torch
import torch.nn.functional as F
from remote_code import shipped_files
from transformers import (
    AutoModel,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from hf_lm import HfLmRNNSeq2SeqConfig, HfLmRNNSeq2SeqForConditionalGeneration, HfLmRNNSeq2SeqModel
from hf_lm.models.hflm_rnn_blocks import RecurrentCache
from hf_lm.plots import plot_alignment

V = 41
PAD, BOS, EOS = 0, 1, 2
ATTENTIONS = ["none", "bahdanau", "luong_dot", "luong_general"]
CELLS = ["lstm", "gru", "rnn_tanh", "rnn_relu"]


def tiny_config(**overrides) -> HfLmRNNSeq2SeqConfig:
    kwargs = dict(
        vocab_size=V,
        embedding_size=12,
        hidden_size=16,
        cell_type="lstm",
        encoder_layers=2,
        decoder_layers=2,
        bidirectional_encoder=True,
        attention="bahdanau",
        input_feeding=True,
        hidden_dropout=0.0,
        # a wide init: random tiny models then have peaked, distinct logits (no near-ties in greedy tests)
        initializer_range=0.4,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    if overrides.get("attention") == "none":
        kwargs["input_feeding"] = False
    kwargs.update(overrides)
    return HfLmRNNSeq2SeqConfig(**kwargs)


def build(**overrides) -> HfLmRNNSeq2SeqForConditionalGeneration:
    return HfLmRNNSeq2SeqForConditionalGeneration(tiny_config(**overrides)).eval()


# one variant per row, together covering every attention kind, cell, input feeding on/off,
# uni/bidirectional encoders, unequal depths and tied embeddings
VARIANTS = {
    "none_lstm": dict(attention="none", cell_type="lstm"),
    "bahdanau_gru_feed": dict(attention="bahdanau", cell_type="gru", tie_word_embeddings=True),
    "luong_dot_lstm_uni": dict(
        attention="luong_dot", cell_type="lstm", bidirectional_encoder=False, decoder_layers=1
    ),
    "luong_general_tanh_nofeed": dict(
        attention="luong_general", cell_type="rnn_tanh", input_feeding=False, encoder_layers=1
    ),
    "luong_general_relu": dict(
        attention="luong_general", cell_type="rnn_relu", encoder_layers=3, decoder_layers=1
    ),
}


@pytest.fixture(params=sorted(VARIANTS))
def variant(request):
    return VARIANTS[request.param]


def source():
    """A right-padded source batch (the pipelines' convention)."""
    x = torch.randint(3, V, (3, 9))
    mask = torch.ones_like(x)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return x.masked_fill(mask == 0, PAD), mask


# ---------------------------------------------------------------- config


def test_config_validates_every_field():
    cases = [
        (dict(cell_type="transformer"), "`cell_type`"),
        (dict(attention="dot"), "`attention`"),
        (dict(rnn_implementation="cudnn"), "`rnn_implementation`"),
        (dict(attention="none", input_feeding=True), "`input_feeding=True` needs an `attention`"),
        (dict(hidden_size=15, bidirectional_encoder=True), "`hidden_size` must be even"),
        (dict(encoder_layers=0), "`encoder_layers`"),
        (dict(decoder_layers=1.5), "`decoder_layers`"),
        (dict(embedding_size=0), "`embedding_size`"),
        (dict(hidden_dropout=1.0), "`hidden_dropout`"),
        (dict(bidirectional_encoder="yes"), "`bidirectional_encoder`"),
        (dict(initializer_range=-1), "`initializer_range`"),
        (dict(eos_token_id=V), "`eos_token_id`"),
        (dict(decoder_start_token_id=-1), "`decoder_start_token_id`"),
    ]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=message):
            tiny_config(**overrides)
    # allowed values are named in the message
    with pytest.raises(ValueError, match="luong_general"):
        tiny_config(attention="luong")
    config = tiny_config(attention="luong_dot", bidirectional_encoder=False, hidden_size=15)
    assert config.is_encoder_decoder and config.decoder_start_token_id == BOS  # defaults to bos
    assert config.num_hidden_layers == config.encoder_layers  # the generic name reads the encoder depth
    reloaded = HfLmRNNSeq2SeqConfig.from_dict(config.to_dict())
    assert reloaded.attention == "luong_dot" and reloaded.hidden_size == 15


# ---------------------------------------------------------------- forward, loss, attention


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_loss_is_cross_entropy_on_unshifted_labels(attention, cell):
    model = build(attention=attention, cell_type=cell)
    x, mask = source()
    labels = torch.randint(3, V, (3, 5))
    labels[2, 3:] = -100
    out = model(input_ids=x, attention_mask=mask, labels=labels, output_attentions=True)
    assert out.logits.shape == (3, 5, V)
    expected = F.cross_entropy(out.logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    # the decoder read the shifted labels: the same logits from explicit decoder inputs
    decoder_input_ids = torch.cat([torch.full((3, 1), BOS), labels[:, :-1].clamp(min=0)], dim=1)
    explicit = model(input_ids=x, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    assert torch.equal(explicit, out.logits)
    # Trainer's token count turns the mean into a sum over the whole accumulated batch
    n = int((labels != -100).sum())
    summed = model(input_ids=x, attention_mask=mask, labels=labels, num_items_in_batch=2 * n).loss
    torch.testing.assert_close(summed, out.loss / 2)
    if attention == "none":
        assert out.cross_attentions is None
    else:
        (weights,) = out.cross_attentions
        assert weights.shape == (3, 5, 9)


@pytest.mark.parametrize("attention", ATTENTIONS[1:])
def test_attention_rows_sum_to_one_over_real_tokens_and_ignore_padding(attention):
    model = build(attention=attention, cell_type="gru")
    x, mask = source()
    dec = torch.randint(3, V, (3, 4))
    (weights,) = model(
        input_ids=x, attention_mask=mask, decoder_input_ids=dec, output_attentions=True
    ).cross_attentions
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4))
    assert bool((weights[mask[:, None, :].expand_as(weights) == 0] == 0).all())  # exactly zero on padding
    assert bool((weights[:, :, :3] > 0).all())
    # what stands on padded positions does not matter at all
    garbage = x.masked_fill(mask == 0, V - 1)
    again = model(input_ids=garbage, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    torch.testing.assert_close(again.cross_attentions[0], weights)
    # and row 2 (3 real tokens) alone attends exactly as in the batch
    alone = model(input_ids=x[2:, :3], decoder_input_ids=dec[2:], output_attentions=True).cross_attentions[0]
    torch.testing.assert_close(alone[0], weights[2, :, :3], atol=1e-6, rtol=1e-5)


def test_without_attention_the_source_reaches_the_decoder_only_through_the_final_state():
    """The bottleneck of Sutskever et al. (2014): replace every encoder output but the final states
    and the "none" model does not notice; an attentional model does."""
    x, mask = source()
    dec = torch.randint(3, V, (3, 4))
    for attention, changes in (("none", False), ("bahdanau", True), ("luong_dot", True)):
        model = build(attention=attention)
        enc = model.get_encoder()(input_ids=x, attention_mask=mask)
        logits = model(attention_mask=mask, encoder_outputs=enc, decoder_input_ids=dec).logits
        enc.last_hidden_state = torch.randn_like(enc.last_hidden_state)
        other = model(attention_mask=mask, encoder_outputs=enc, decoder_input_ids=dec).logits
        assert torch.equal(logits, other) != changes, attention
        # a different source changes the final state, hence the output, in every model
        x2 = x.clone()
        x2[:, 0] = (x2[:, 0] - 3 + 1) % (V - 3) + 3
        assert not torch.allclose(
            model(input_ids=x2, attention_mask=mask, decoder_input_ids=dec).logits, logits
        )


def test_tanh_bridge_initializes_the_decoder_from_the_final_encoder_states():
    model = build(attention="none", cell_type="lstm", decoder_layers=2)
    x, mask = source()
    enc = model.get_encoder()(input_ids=x, attention_mask=mask)
    # the final forward state is the output at each row's last real token, the final backward state the output at 0
    H2 = model.config.hidden_size // 2
    last = mask.sum(-1) - 1
    out = enc.last_hidden_state
    torch.testing.assert_close(enc.final_hidden_state[:, :H2], out[torch.arange(3), last, :H2])
    torch.testing.assert_close(enc.final_hidden_state[:, H2:], out[:, 0, H2:])
    h0, c0 = model.get_decoder().initial_state(enc)
    bridge_h, bridge_c = model.get_decoder().bridge
    torch.testing.assert_close(
        h0.transpose(0, 1).reshape(3, -1), torch.tanh(bridge_h(enc.final_hidden_state))
    )
    torch.testing.assert_close(c0.transpose(0, 1).reshape(3, -1), torch.tanh(bridge_c(enc.final_cell_state)))


def test_one_step_at_a_time_with_the_cache_equals_the_full_forward(variant):
    model = build(**variant)
    x, mask = source()
    dec = torch.randint(3, V, (3, 6))
    full = model(
        input_ids=x,
        attention_mask=mask,
        decoder_input_ids=dec,
        output_attentions=True,
        output_hidden_states=True,
    )
    enc = model.get_encoder()(input_ids=x, attention_mask=mask)
    cache, logits, weights, hidden = None, [], [], []
    for t in range(6):
        out = model(
            attention_mask=mask,
            encoder_outputs=enc,
            decoder_input_ids=dec[:, t : t + 1],
            past_key_values=cache,
            use_cache=True,
            output_attentions=True,
            output_hidden_states=True,
        )
        cache = out.past_key_values
        logits.append(out.logits)
        hidden.append(out.decoder_hidden_states[-1])
        if out.cross_attentions is not None:
            weights.append(out.cross_attentions[0])
    assert isinstance(cache, RecurrentCache) and cache.get_seq_length() == 6
    # the recurrence is the same computation: states and attention agree bit for bit; the logits
    # come from one (B, T, H) matmul against T (B, 1, H) ones, equal up to rounding
    assert torch.equal(torch.cat(hidden, dim=1), full.decoder_hidden_states[-1])
    torch.testing.assert_close(torch.cat(logits, dim=1), full.logits, rtol=1e-6, atol=1e-6)
    if weights:
        assert torch.equal(torch.cat(weights, dim=1), full.cross_attentions[0])


def test_padded_decoder_steps_leave_the_state_unchanged():
    model = build(cell_type="lstm", attention="luong_general")
    x, mask = source()
    enc = model.get_encoder()(input_ids=x, attention_mask=mask)
    dec = torch.randint(3, V, (3, 3))
    plain = model(attention_mask=mask, encoder_outputs=enc, decoder_input_ids=dec[:, :1], use_cache=True)
    dec_mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    # a left-padded prompt: row 0's extra steps are padding, so its state is the one after step 0
    padded = model(
        attention_mask=mask,
        encoder_outputs=enc,
        decoder_input_ids=dec,
        decoder_attention_mask=dec_mask,
        use_cache=True,
    )
    for a, b in zip(plain.past_key_values.state, padded.past_key_values.state):
        assert torch.equal(a[:, 0], b[:, 0]) and not torch.equal(a[:, 2], b[:, 2])
    assert torch.equal(
        plain.past_key_values.extras["input_feed"][0], padded.past_key_values.extras["input_feed"][0]
    )


def test_hidden_states_and_base_model():
    config = tiny_config(attention="luong_general", cell_type="gru", decoder_layers=2, encoder_layers=2)
    model = HfLmRNNSeq2SeqModel(config).eval()
    x, mask = source()
    dec = torch.randint(3, V, (3, 4))
    out = model(input_ids=x, attention_mask=mask, decoder_input_ids=dec, output_hidden_states=True)
    assert out.last_hidden_state.shape == (3, 4, 16)
    assert [tuple(h.shape) for h in out.decoder_hidden_states] == [
        (3, 4, 12),
        (3, 4, 16),
        (3, 4, 16),
        (3, 4, 16),
    ]
    assert torch.equal(out.decoder_hidden_states[-1], out.last_hidden_state)
    assert [tuple(h.shape) for h in out.encoder_hidden_states] == [(3, 9, 12), (3, 9, 16), (3, 9, 16)]
    assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    assert model.get_encoder() is model.encoder and model.get_decoder() is model.decoder
    assert isinstance(model(input_ids=x, decoder_input_ids=dec, return_dict=False), tuple)


# ---------------------------------------------------------------- generation


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(do_sample=False),
        dict(num_beams=3, length_penalty=0.5, early_stopping=True, num_return_sequences=2),
        dict(do_sample=True, top_k=10),
    ],
    ids=["greedy", "beam", "sample"],
)
def test_generate_cached_equals_uncached(variant, kwargs):
    model = build(**variant)
    x, mask = source()
    outs = []
    for use_cache in (True, False):
        torch.manual_seed(0)
        outs.append(model.generate(x, attention_mask=mask, max_new_tokens=7, use_cache=use_cache, **kwargs))
    assert torch.equal(outs[0], outs[1])
    assert len(set(outs[0][:, 1:].flatten().tolist())) > 2  # not a degenerate constant output


def test_padded_batch_generates_what_each_source_generates_alone(variant):
    model = build(**variant)
    x, mask = source()
    for kwargs in (dict(do_sample=False), dict(num_beams=2)):
        batch = model.generate(x, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, **kwargs)
        for i in range(3):
            n = int(mask[i].sum())
            alone = model.generate(x[i : i + 1, :n], max_new_tokens=6, min_new_tokens=6, **kwargs)
            assert torch.equal(batch[i, : alone.shape[1]], alone[0]), (kwargs, i)


def test_generate_returns_the_attention_weights():
    model = build(attention="luong_general", cell_type="gru")
    x, mask = source()
    out = model.generate(
        x, attention_mask=mask, max_new_tokens=5, output_attentions=True, return_dict_in_generate=True
    )
    assert len(out.cross_attentions) == 5
    weights = torch.cat([step[0] for step in out.cross_attentions], dim=1)  # (B, 5, S)
    assert weights.shape == (3, 5, 9)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    assert bool((weights.masked_select(mask[:, None, :].expand_as(weights) == 0) == 0).all())
    # the same weights as a teacher-forced forward over the generated tokens
    full = model(
        input_ids=x, attention_mask=mask, decoder_input_ids=out.sequences[:, :-1], output_attentions=True
    )
    torch.testing.assert_close(full.cross_attentions[0], weights)
    assert isinstance(out.past_key_values, RecurrentCache)
    beams = model.generate(x, attention_mask=mask, max_new_tokens=4, num_beams=2, output_attentions=True,
                           return_dict_in_generate=True)  # fmt: skip
    assert beams.cross_attentions[0][0].shape == (6, 1, 9)  # running beams of every source


def test_alignment_plot(tmp_path, drawn_figures):
    """Each form of the weights draws the matrix it holds (read back from the saved figures)."""
    model = build(attention="bahdanau")
    x, mask = source()
    out = model(
        input_ids=x,
        attention_mask=mask,
        decoder_input_ids=torch.randint(3, V, (3, 4)),
        output_attentions=True,
    )
    path = plot_alignment(
        out.cross_attentions, ["a", "b", "c"], ["w", "x", "y", "z"], tmp_path / "a.png", batch_index=2
    )
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
    gen = model.generate(
        x, attention_mask=mask, max_new_tokens=3, output_attentions=True, return_dict_in_generate=True
    )
    path = plot_alignment(
        gen.cross_attentions, list("abcdefghi"), ["1", "2", "3"], tmp_path / "g.png", title="gen"
    )
    assert path.read_bytes()[:4] == b"\x89PNG"
    path = plot_alignment(out.cross_attentions[0][0], list("abcdefghi"), list("wxyz"), tmp_path / "t.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    ramp = torch.arange(12.0).reshape(4, 3) / 12  # rows that differ (an untrained model's are near uniform)
    plot_alignment(ramp, list("abc"), list("wx"), tmp_path / "r.png")
    drawn = [figure.axes[0].images[0].get_array() for figure in drawn_figures]
    expected = [
        out.cross_attentions[-1][2, :4, :3],  # a forward's weights, trimmed to the labels given
        torch.cat([step[-1] for step in gen.cross_attentions], dim=-2)[0, :3],  # generate()'s, one row a step
        out.cross_attentions[0][0],  # a (T_tgt, T_src) matrix as it is
        ramp[:2],
    ]
    assert len(drawn) == len(expected)
    for image, weights in zip(drawn, expected):
        torch.testing.assert_close(torch.as_tensor(image), weights.detach().float(), rtol=0, atol=0)
    assert drawn_figures[1].axes[0].get_title() == "gen"
    with pytest.raises(ValueError, match="source"):
        plot_alignment(out.cross_attentions, list("abcdefghij"), ["w"], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="empty"):
        plot_alignment((), ["a"], ["b"], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="batch_index"):
        plot_alignment(out.cross_attentions, ["a"], ["b"], tmp_path / "bad.png", batch_index=3)
    with pytest.raises(ValueError, match="must be a"):
        plot_alignment(torch.ones(5), ["a"], ["b"], tmp_path / "bad.png")


# ---------------------------------------------------------------- scheduled sampling


def test_scheduled_sampling():
    x, mask = source()
    labels = torch.randint(3, V, (3, 6))

    def run(model, p, seed=0):
        torch.manual_seed(seed)
        return model(input_ids=x, attention_mask=mask, labels=labels, scheduled_sampling_probability=p)

    model = build(attention="luong_general", cell_type="lstm", hidden_dropout=0.2).train()
    plain = run(model, None)
    for p in (0, 0.0):  # teacher forcing, bit for bit (dropout masks included)
        assert torch.equal(run(model, p).logits, plain.logits) and torch.equal(run(model, p).loss, plain.loss)
    assert torch.equal(run(model, 0.5, seed=3).logits, run(model, 0.5, seed=3).logits)  # seeded: reproducible
    assert not torch.equal(run(model, 0.5, seed=3).logits, run(model, 0.5, seed=4).logits)
    model.eval()
    assert torch.equal(run(model, 1.0).logits, run(model, None).logits)  # eval mode: always teacher forcing

    model = build(attention="bahdanau", cell_type="gru").train()  # no dropout: only the inputs differ
    plain, sampled = run(model, None), run(model, 1.0)
    assert torch.equal(sampled.logits[:, 0], plain.logits[:, 0])  # the first input is always the start token
    assert not torch.equal(sampled.logits[:, 1], plain.logits[:, 1])
    sampled.loss.backward()
    assert model.lm_head.weight.grad is not None
    # without labels there is nothing to schedule: decoder inputs are read as given
    given = model(
        input_ids=x, attention_mask=mask, decoder_input_ids=labels, scheduled_sampling_probability=1.0
    )
    assert torch.equal(given.logits, model(input_ids=x, attention_mask=mask, decoder_input_ids=labels).logits)
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(ValueError, match="scheduled_sampling_probability"):
            model(input_ids=x, labels=labels, scheduled_sampling_probability=bad)


# ---------------------------------------------------------------- training utilities


def test_data_collator_for_seq2seq_builds_decoder_inputs():
    model = build()
    features = [
        {"input_ids": [5, 6, 7, EOS], "labels": [8, 9, EOS]},
        {"input_ids": [5, EOS], "labels": [10, EOS]},
    ]

    class Tok:  # the collator only pads
        pad_token_id = PAD
        padding_side = "right"

        def pad(self, features, **kwargs):
            n = max(len(f["input_ids"]) for f in features)
            ids = [f["input_ids"] + [PAD] * (n - len(f["input_ids"])) for f in features]
            mask = [[1] * len(f["input_ids"]) + [0] * (n - len(f["input_ids"])) for f in features]
            return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}

    batch = DataCollatorForSeq2Seq(Tok(), model=model, return_tensors="pt")(features)
    assert batch["labels"].tolist() == [[8, 9, EOS], [10, EOS, -100]]
    assert batch["decoder_input_ids"].tolist() == [[BOS, 8, 9], [BOS, 10, EOS]]
    out = model(**batch)
    assert out.loss.isfinite()
    torch.testing.assert_close(
        out.loss,
        model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss,
    )


def test_seq2seq_trainer_runs_a_step(tmp_path):
    from datasets import Dataset

    model = build(attention="bahdanau", cell_type="gru").train()
    rows = [{"input_ids": [3 + i, 4 + i, EOS], "labels": [4 + i, 3 + i, EOS]} for i in range(8)]
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_steps=1,
    )

    class Tok:
        pad_token_id = PAD
        padding_side = "right"

        def pad(self, features, **kwargs):
            n = max(len(f["input_ids"]) for f in features)
            return {
                "input_ids": torch.tensor([f["input_ids"] + [PAD] * (n - len(f["input_ids"])) for f in features]),
                "attention_mask": torch.tensor([[1] * len(f["input_ids"]) + [0] * (n - len(f["input_ids"])) for f in features]),
            }  # fmt: skip

    before = model.lm_head.weight.detach().clone()
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        data_collator=DataCollatorForSeq2Seq(Tok(), model=model, return_tensors="pt"),
    )
    result = trainer.train()
    assert result.global_step == 2 and result.training_loss > 0
    assert not torch.equal(before, model.lm_head.weight.detach())


def test_clear_errors():
    model = build()
    x, mask = source()
    dec = torch.randint(3, V, (3, 2))
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model(input_ids=x, attention_mask=mask)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(input_ids=torch.full((1, 3), V), labels=torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(input_ids=x, decoder_input_ids=torch.full((3, 2), V))
    with pytest.raises(ValueError, match="labels"):
        model(input_ids=x, labels=torch.ones(3, dtype=torch.long))
    with pytest.raises(ValueError, match="labels"):
        model(input_ids=x, decoder_input_ids=dec, labels=torch.full((3, 2), V))
    with pytest.raises(ValueError, match="empty"):
        model(input_ids=torch.zeros(0, 3, dtype=torch.long), decoder_input_ids=dec[:0])
    empty_row = mask.clone()
    empty_row[1] = 0
    with pytest.raises(ValueError, match="row 1 has no real token"):
        model(input_ids=x, attention_mask=empty_row, decoder_input_ids=dec)
    with pytest.raises(ValueError, match="attention_mask"):
        model(input_ids=x, attention_mask=mask[:, :4], decoder_input_ids=dec)
    with pytest.raises(ValueError, match="batch size"):
        model(input_ids=x, decoder_input_ids=dec[:2])
    with pytest.raises(ValueError, match="RecurrentCache"):
        model(input_ids=x, decoder_input_ids=dec, past_key_values=("not", "a", "cache"))
    with pytest.raises(ValueError, match="decoder_attention_mask"):
        model(input_ids=x, decoder_input_ids=dec, decoder_attention_mask=torch.ones(3, 5))
    with pytest.raises(ValueError, match="encoder_outputs"):
        model(encoder_outputs=(torch.zeros(3, 9, 16),), decoder_input_ids=dec)
    with pytest.raises(ValueError, match="inputs_embeds"):
        model(inputs_embeds=torch.zeros(3, 9, 5), decoder_input_ids=dec)
    # the encoder output's tuple form works like the object
    enc = model.get_encoder()(input_ids=x, attention_mask=mask)
    as_tuple = model(attention_mask=mask, encoder_outputs=enc.to_tuple(), decoder_input_ids=dec).logits
    assert torch.equal(as_tuple, model(input_ids=x, attention_mask=mask, decoder_input_ids=dec).logits)
    no_start = HfLmRNNSeq2SeqForConditionalGeneration(tiny_config(bos_token_id=None))
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        no_start(input_ids=x, labels=dec)


def test_tied_embeddings_and_init():
    model = build(tie_word_embeddings=True, embedding_size=12, hidden_size=16)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.output_projection.weight.shape == (
        12,
        16,
    )  # output vectors are projected to the embedding width
    untied = build(tie_word_embeddings=False, initializer_range=0.05)  # tighter than torch's default init
    assert isinstance(untied.output_projection, torch.nn.Identity) and untied.lm_head.weight.shape == (V, 16)
    r = untied.config.initializer_range
    for name, param in untied.named_parameters():
        if name.endswith("bias") or ".bias_" in name:
            assert bool((param == 0).all()), name
        else:
            assert param.abs().max() <= r, name
    assert bool((untied.model.embed_tokens.weight[PAD] == 0).all())


# ---------------------------------------------------------------- saving, remote code, pipeline

SHIPPED = {
    "hflm_common.py",
    "hflm_inputs.py",
    "hflm_losses.py",
    "hflm_pretrained.py",
    "hflm_rnn_blocks.py",
    "hflm_configuration_rnn_seq2seq.py",
    "hflm_modeling_rnn_seq2seq.py",
    "hflm_pipelines_seq2seq.py",  # the generation head carries hf_lm's seq2seq pipelines
}


@pytest.mark.parametrize("tied", [False, True])
def test_save_load_round_trip(tmp_path, tied):
    from safetensors import safe_open

    model = build(tie_word_embeddings=tied, attention="luong_general", cell_type="gru")
    model.save_pretrained(tmp_path)
    loaded, info = HfLmRNNSeq2SeqForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    x, mask = source()
    assert torch.equal(
        loaded.generate(x, attention_mask=mask, max_new_tokens=5, num_beams=2),
        model.generate(x, attention_mask=mask, max_new_tokens=5, num_beams=2),
    )
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert ("lm_head.weight" in set(f.keys())) != tied  # a tied head is not stored twice
    # the code it ships (imports and loading as remote code: tests/test_model_properties.py)
    assert shipped_files(tmp_path) == SHIPPED
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "hflm_configuration_rnn_seq2seq.HfLmRNNSeq2SeqConfig",
        "AutoModel": "hflm_modeling_rnn_seq2seq.HfLmRNNSeq2SeqModel",
        "AutoModelForSeq2SeqLM": "hflm_modeling_rnn_seq2seq.HfLmRNNSeq2SeqForConditionalGeneration",
    }
    assert isinstance(AutoModelForSeq2SeqLM.from_pretrained(tmp_path), HfLmRNNSeq2SeqForConditionalGeneration)
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert isinstance(base, HfLmRNNSeq2SeqModel)
    torch.testing.assert_close(
        base(input_ids=x, attention_mask=mask, decoder_input_ids=x[:, :3]).last_hidden_state,
        model.model(input_ids=x, attention_mask=mask, decoder_input_ids=x[:, :3]).last_hidden_state,
    )
    card = (tmp_path / "README.md").read_text()
    assert "hflm_rnn_seq2seq" in card and "luong_general" in card


def test_translation_pipeline_on_a_saved_folder(tmp_path):
    from transformers import pipeline

    from training.data.tokenizer import BART_SPECIAL_TOKENS, train_tokenizer

    texts = ["the cat sat on the mat", "ein hund lief nach hause", "a dog ran home"] * 10
    tokenizer = train_tokenizer(texts, kind="wordpiece", vocab_size=V, special_tokens=BART_SPECIAL_TOKENS)
    ids = {k: getattr(tokenizer, k) for k in ("pad_token_id", "bos_token_id", "eos_token_id")}
    model = build(vocab_size=len(tokenizer), attention="luong_general", **ids)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    translate = pipeline("hflm-translation", model=str(tmp_path), trust_remote_code=True, prefix_template="")
    inputs = ["ein hund lief", "die katze", "the cat sat on the mat"]
    out = translate(inputs, num_beams=2, max_new_tokens=6, batch_size=2)
    for text, result in zip(inputs, out):
        expected = model.generate(**tokenizer(text, return_tensors="pt"), num_beams=2, max_new_tokens=6)
        assert result["translation_text"] == tokenizer.decode(expected[0], skip_special_tokens=True)
    assert any(r["translation_text"] for r in out)


# ---------------------------------------------------------------- learning toy tasks

ALPHABET = 20  # tokens 3 .. 22


def toy_batch(generator, n, task):
    """Random sequences of 5-8 tokens, right-padded; targets are the copy or the reversal plus EOS."""
    lengths = torch.randint(5, 9, (n,), generator=generator)
    S = int(lengths.max())
    src = torch.full((n, S), PAD)
    labels = torch.full((n, S + 1), -100)
    for i, n_tok in enumerate(lengths.tolist()):
        seq = torch.randint(3, 3 + ALPHABET, (n_tok,), generator=generator)
        src[i, :n_tok] = seq
        labels[i, :n_tok] = seq.flip(0) if task == "reverse" else seq
        labels[i, n_tok] = EOS
    return src, (src != PAD).long(), labels


def train_toy(task, attention, cell_type, seed=0, steps=400):
    torch.manual_seed(seed)
    config = tiny_config(
        vocab_size=3 + ALPHABET,
        embedding_size=32,
        hidden_size=64,
        cell_type=cell_type,
        encoder_layers=1,
        decoder_layers=1,
        attention=attention,
        input_feeding=True,
        initializer_range=0.1,
    )
    model = HfLmRNNSeq2SeqForConditionalGeneration(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.05, 1 - s / steps))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        src, mask, labels = toy_batch(generator, 64, task)
        loss = model(input_ids=src, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    model.eval()
    src, mask, labels = toy_batch(torch.Generator().manual_seed(10_000 + seed), 200, task)  # held out
    with torch.no_grad():
        out = model.generate(src, attention_mask=mask, max_new_tokens=10, do_sample=False)[:, 1:]
    exact = [
        out[i, : int((labels[i] != -100).sum())].tolist() == labels[i][labels[i] != -100].tolist()
        for i in range(len(src))
    ]
    return sum(exact) / len(exact)


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, attention, cell_type",
    [("copy", "luong_general", "gru"), ("reverse", "bahdanau", "lstm")],
)
def test_learns_toy_copy_and_reverse_tasks(task, attention, cell_type):
    """Exact sequences on 200 held-out sources: 99.5-100% over seeds 0-7 and other CPU kernels
    (conftest), about 0% untrained. The bar leaves room for a few near-ties that another CPU's
    numbers may decide the other way (all 200 failed seeds 3 and 7 of the copy task)."""
    assert train_toy(task, attention, cell_type) >= 0.97
