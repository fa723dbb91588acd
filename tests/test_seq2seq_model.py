"""The T5- and BART-style encoder-decoders: parity with transformers, caching, generation, saving."""

import json

import pytest
import torch
import torch.nn.functional as F
from remote_code import shipped_files
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    DataCollatorForSeq2Seq,
    T5Config,
    T5ForConditionalGeneration,
)

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBartForSequenceClassification,
    HfLmBartModel,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
    HfLmT5ForSequenceClassification,
    HfLmT5Model,
)
from hf_lm.convert import from_transformers
from hf_lm.models.hflm_losses import (
    shift_tokens_right,
)

V = 99
SIZES = dict(
    vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64
)

# (config class, model class, overrides): every family and preset, and unequal depths
VARIANTS = {
    "t5": (
        HfLmT5Config,
        HfLmT5ForConditionalGeneration,
        dict(relative_attention_num_buckets=8, relative_attention_max_distance=16),
    ),
    "t5_v1_1_deep_decoder": (
        HfLmT5Config,
        HfLmT5ForConditionalGeneration,
        dict(hidden_act="geglu_tanh", scale_decoder_output=False, decoder_layers=3),
    ),
    "bart": (
        HfLmBartConfig,
        HfLmBartForConditionalGeneration,
        dict(pad_token_id=1, eos_token_id=2, bos_token_id=0),
    ),
    "transformer_shallow_decoder": (
        HfLmBartConfig,
        HfLmBartForConditionalGeneration,
        dict(HfLmBartConfig.PRESETS["transformer"], num_hidden_layers=3, decoder_layers=1),
    ),
}


def build(name, **extra):
    config_cls, model_cls, overrides = VARIANTS[name]
    config = config_cls(**{**SIZES, "hidden_dropout": 0.0, **overrides, **extra})
    return model_cls(config).eval()


@pytest.fixture(params=sorted(VARIANTS))
def variant(request):
    return request.param


def source():
    """A right-padded source batch (the encoders' convention)."""
    x = torch.randint(3, V, (3, 9))
    mask = torch.ones_like(x)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    return x.masked_fill(mask == 0, 0), mask


# ---------------------------------------------------------------- parity with transformers

T5_REF = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_heads=4, relative_attention_num_buckets=8,
              relative_attention_max_distance=16, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
              eos_token_id=1)  # fmt: skip
BART_REF = dict(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40,
                dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)  # fmt: skip
REFERENCES = {
    "t5": lambda: T5ForConditionalGeneration(T5Config(**T5_REF, num_layers=3, num_decoder_layers=2)),
    "t5_v1_1": lambda: T5ForConditionalGeneration(
        T5Config(
            **T5_REF,
            num_layers=2,
            num_decoder_layers=2,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
        )
    ),
    "bart": lambda: BartForConditionalGeneration(BartConfig(**BART_REF)),
}


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_transformers(name, impl):
    ref = REFERENCES[name]()
    ref.config._attn_implementation = impl
    ref.eval()
    new = from_transformers(ref)
    x, mask = source()
    labels = torch.randint(3, V, (3, 5))
    labels[2, 3:] = -100
    with torch.no_grad():
        a = ref(input_ids=x, attention_mask=mask, labels=labels, use_cache=False)
        b = new(input_ids=x, attention_mask=mask, labels=labels)
    keep = mask.bool()
    torch.testing.assert_close(
        b.encoder_last_hidden_state[keep], a.encoder_last_hidden_state[keep], atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(b.loss, a.loss, atol=1e-5, rtol=1e-5)
    for kwargs in (dict(do_sample=False), dict(num_beams=3, length_penalty=0.6, num_return_sequences=2)):
        expected = ref.generate(x, attention_mask=mask, max_new_tokens=8, **kwargs)
        assert torch.equal(new.generate(x, attention_mask=mask, max_new_tokens=8, **kwargs), expected), kwargs


def test_unsupported_t5_and_bart_configs_are_refused():
    with pytest.raises(ValueError, match="feed_forward_proj"):
        from_transformers(
            T5ForConditionalGeneration(T5Config(**{**T5_REF, "feed_forward_proj": "gated-tanh"}))
        )
    with pytest.raises(ValueError, match="same heads"):
        from_transformers(
            BartForConditionalGeneration(BartConfig(**{**BART_REF, "decoder_attention_heads": 2}))
        )


# ---------------------------------------------------------------- the model's own behaviour


def test_labels_are_unshifted_targets(variant):
    model = build(variant)
    x, mask = source()
    labels = torch.randint(3, V, (3, 6))
    labels[0, 4:] = -100
    out = model(input_ids=x, attention_mask=mask, labels=labels)
    expected = F.cross_entropy(out.logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    start = model.config.decoder_start_token_id
    decoder_inputs = model.prepare_decoder_input_ids_from_labels(labels)
    assert decoder_inputs[:, 0].eq(start).all() and torch.equal(decoder_inputs[1, 1:], labels[1, :-1])
    assert (decoder_inputs != -100).all()  # ignored targets become padding, never an index
    explicit = model(input_ids=x, attention_mask=mask, decoder_input_ids=decoder_inputs, labels=labels)
    torch.testing.assert_close(explicit.logits, out.logits)


def test_the_decoder_is_causal_and_the_encoder_bidirectional(variant):
    model = build(variant)
    x, mask = source()
    y = torch.randint(3, V, (3, 6))
    with torch.no_grad():
        base = model(input_ids=x, attention_mask=mask, decoder_input_ids=y)
        later = y.clone()
        later[:, 4] = (later[:, 4] + 1 - 3) % (V - 3) + 3
        changed = model(input_ids=x, attention_mask=mask, decoder_input_ids=later)
        torch.testing.assert_close(
            changed.logits[:, :4], base.logits[:, :4], rtol=0, atol=1e-6
        )  # no leak back
        source_change = x.clone()
        source_change[0, 5] = (source_change[0, 5] + 1 - 3) % (V - 3) + 3
        enc = model.get_encoder()
        a = enc(input_ids=x, attention_mask=mask).last_hidden_state
        b = enc(input_ids=source_change, attention_mask=mask).last_hidden_state
    assert (a[0, 0] - b[0, 0]).abs().max() > 1e-5  # the first source position saw position 5


def test_cached_decoding_equals_the_full_forward(variant):
    model = build(variant)
    x, mask = source()
    y = torch.randint(3, V, (3, 7))
    with torch.no_grad():
        full = model(input_ids=x, attention_mask=mask, decoder_input_ids=y, use_cache=False).logits
        enc = model.get_encoder()(input_ids=x, attention_mask=mask)
        out = model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=y[:, :4], use_cache=True)
        cache = out.past_key_values
        steps = [out.logits]
        for t in range(4, 7):
            out = model(
                encoder_outputs=enc,
                attention_mask=mask,
                decoder_input_ids=y[:, t : t + 1],
                past_key_values=cache,
            )
            cache = out.past_key_values
            steps.append(out.logits)
    assert cache.self_attention_cache.get_seq_length() == 7
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)


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
    model = build(variant)
    x, mask = source()
    outs = []
    for use_cache in (True, False):
        torch.manual_seed(0)
        outs.append(model.generate(x, attention_mask=mask, max_new_tokens=7, use_cache=use_cache, **kwargs))
    assert torch.equal(outs[0], outs[1])


def test_padded_batch_generates_what_each_source_generates_alone(variant):
    model = build(variant)
    x, mask = source()
    batch = model.generate(x, attention_mask=mask, max_new_tokens=6, num_beams=2, min_new_tokens=6)
    for i in range(3):
        n = int(mask[i].sum())
        alone = model.generate(x[i : i + 1, :n], max_new_tokens=6, num_beams=2, min_new_tokens=6)
        assert torch.equal(batch[i, : alone.shape[1]], alone[0]), i


def test_data_collator_for_seq2seq_builds_decoder_inputs():
    model = build("t5")
    features = [{"input_ids": [5, 6, 7, 1], "labels": [8, 9, 1]}, {"input_ids": [5, 1], "labels": [10, 1]}]

    class Tok:  # the collator only pads
        pad_token_id = 0
        padding_side = "right"

        def pad(self, features, **kwargs):
            n = max(len(f["input_ids"]) for f in features)
            ids = [f["input_ids"] + [0] * (n - len(f["input_ids"])) for f in features]
            mask = [[1] * len(f["input_ids"]) + [0] * (n - len(f["input_ids"])) for f in features]
            return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}

    batch = DataCollatorForSeq2Seq(Tok(), model=model, return_tensors="pt")(features)
    assert batch["labels"].tolist() == [[8, 9, 1], [10, 1, -100]]
    assert batch["decoder_input_ids"].tolist() == [[0, 8, 9], [0, 10, 1]]
    assert model(**batch).loss.isfinite()


def test_sequence_classification_heads():
    for cls, cfg in (
        (HfLmT5ForSequenceClassification, HfLmT5Config),
        (HfLmBartForSequenceClassification, HfLmBartConfig),
    ):
        model = cls(cfg(**SIZES, num_labels=3)).eval()
        x, mask = source()
        out = model(input_ids=x, attention_mask=mask, labels=torch.tensor([0, 2, 1]))
        assert out.logits.shape == (3, 3)
        torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, torch.tensor([0, 2, 1])))
        single = model(input_ids=x[2:, :4]).logits  # the right-padded row alone
        torch.testing.assert_close(single[0], out.logits[2], atol=1e-5, rtol=1e-4)
        # the head reads the decoder state of each row's last real token (BART's last EOS), by hand:
        decoder_ids = shift_tokens_right(x, model.config.pad_token_id, model.config.decoder_start_token_id)
        hidden = model.model(
            input_ids=x, attention_mask=mask, decoder_input_ids=decoder_ids, decoder_attention_mask=mask
        ).last_hidden_state  # (B, T, C)
        last = mask.sum(-1) - 1  # (B,) right padding: the last real token
        torch.testing.assert_close(out.logits, model.classifier(hidden[torch.arange(3), last]))
        assert not torch.allclose(out.logits, model.classifier(hidden[:, 0]), atol=1e-4)  # not token 0


def test_bad_inputs_and_configs():
    model = build("bart")
    x, mask = source()
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model(input_ids=x, attention_mask=mask)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(input_ids=torch.full((1, 3), V), labels=torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        model(input_ids=torch.randint(3, V, (1, 65)), labels=torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="labels"):
        model(input_ids=x, labels=torch.ones(3, dtype=torch.long))
    with pytest.raises(ValueError, match="`decoder_layers`"):
        HfLmT5Config(**SIZES, decoder_layers=0)
    with pytest.raises(ValueError, match="`decoder_start_token_id`"):
        HfLmT5Config(**SIZES, decoder_start_token_id=V)
    with pytest.raises(ValueError, match="`relative_attention_num_buckets`"):
        HfLmT5Config(**SIZES, relative_attention_num_buckets=2)
    with pytest.raises(ValueError, match="Unknown preset"):
        HfLmBartConfig.from_preset("gpt")
    assert HfLmT5Config(**SIZES, num_decoder_layers=5).decoder_layers == 5  # T5's name is an alias


SHIPPED = {
    "hflm_attention.py",
    "hflm_layers.py",
    "hflm_masks.py",
    "hflm_positions.py",
    "hflm_stack.py",
    "hflm_common.py",
    "hflm_inputs.py",
    "hflm_losses.py",
    "hflm_pretrained.py",
    "hflm_configuration_base.py",
    "hflm_configuration_seq2seq.py",
    "hflm_modeling_seq2seq.py",
    "hflm_pipelines_seq2seq.py",  # the generation head carries hf_lm's seq2seq pipelines
}


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_save_load_and_auto_map(tmp_path, name):
    model = build("t5_v1_1_deep_decoder" if name == "t5" else "bart")
    model.save_pretrained(tmp_path)
    loaded, info = type(model).from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    x, mask = source()
    assert torch.equal(
        loaded.generate(x, attention_mask=mask, max_new_tokens=5),
        model.generate(x, attention_mask=mask, max_new_tokens=5),
    )
    # the code it ships (imports and loading as remote code: tests/test_model_properties.py)
    assert shipped_files(tmp_path) == SHIPPED
    family = "T5" if name == "t5" else "Bart"
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": f"hflm_configuration_seq2seq.HfLm{family}Config",
        "AutoModel": f"hflm_modeling_seq2seq.HfLm{family}Model",
        "AutoModelForSeq2SeqLM": f"hflm_modeling_seq2seq.HfLm{family}ForConditionalGeneration",
        "AutoModelForSequenceClassification": f"hflm_modeling_seq2seq.HfLm{family}ForSequenceClassification",
        # the family's Mask-Predict head (it refuses this causal decoder's config, naming the field)
        "AutoModelForMaskedLM": f"hflm_modeling_seq2seq.HfLm{family}ForMaskPredict",
    }
    # the bare model loads from the same folder, its encoder the saved one
    base = (HfLmT5Model if name == "t5" else HfLmBartModel).from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        base.get_encoder()(input_ids=x, attention_mask=mask).last_hidden_state,
        model.get_encoder()(input_ids=x, attention_mask=mask).last_hidden_state,
    )


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_hf_lm_seq2seq_pipelines_on_saved_hf_lm_models(tmp_path, name):
    from transformers import pipeline

    from training.data.tokenizer import BART_SPECIAL_TOKENS, T5_SPECIAL_TOKENS, train_tokenizer

    texts = ["the cat sat on the mat", "ein hund lief nach hause", "a dog ran home"] * 10
    special = T5_SPECIAL_TOKENS if name == "t5" else BART_SPECIAL_TOKENS
    tokenizer = train_tokenizer(texts, kind="wordpiece", vocab_size=V, special_tokens=special)
    model = build(name, **{k: getattr(tokenizer, k) for k in ("pad_token_id", "eos_token_id")})
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    translate = pipeline(
        "hflm-translation", model=str(tmp_path), trust_remote_code=True, src_lang="de", tgt_lang="en"
    )
    out = translate(["ein hund lief", "die katze"], num_beams=2, max_new_tokens=6, batch_size=2)
    for text, result in zip(["ein hund lief", "die katze"], out):
        enc = tokenizer("translate German to English: " + text, return_tensors="pt")
        expected = model.generate(**enc, num_beams=2, max_new_tokens=6)
        assert result["translation_text"] == tokenizer.decode(expected[0], skip_special_tokens=True)


def test_beam_search_reorders_only_the_self_attention_cache(monkeypatch):
    """All beams of a source share its encoder keys/values: generate() goes through the model's
    `_reorder_cache`, which leaves the cross-attention cache alone (outputs are checked against
    transformers and against uncached decoding above)."""
    model = build("bart")
    x, mask = source()
    calls = []
    original = type(model)._reorder_cache

    def spy(self, past, beam_idx):
        cross = [layer.keys for layer in past.cross_attention_cache.layers]
        out = original(self, past, beam_idx)
        assert all(a is b for a, b in zip(cross, (layer.keys for layer in past.cross_attention_cache.layers)))
        calls.append(beam_idx.shape)
        return out

    monkeypatch.setattr(type(model), "_reorder_cache", spy)
    model.generate(x, attention_mask=mask, max_new_tokens=5, min_new_tokens=5, num_beams=3)
    assert calls and calls[0] == (9,)


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_bare_model_extracts_features_from_input_ids_alone(name):
    """As transformers' BartModel: without decoder inputs the decoder reads the source shifted right,
    under the source's mask shifted with it (the start token is real; the source's last real token,
    read one step later, too). Left padding: tests/test_model_properties.py's padded-row check."""
    config_cls, model_cls, overrides = VARIANTS[name]
    bare = {"t5": HfLmT5Model, "bart": HfLmBartModel}[name]
    model = bare(config_cls(**{**SIZES, "hidden_dropout": 0.0, **overrides})).eval()
    x, mask = source()
    start = model.config.decoder_start_token_id
    assert bool(mask[:, 0].all()), "right padding"
    shifted = torch.cat([torch.full((3, 1), start), x[:, :-1]], dim=1)
    shifted_mask = torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1)
    with torch.no_grad():
        alone = model(input_ids=x, attention_mask=mask).last_hidden_state
        explicit = model(
            input_ids=x, attention_mask=mask, decoder_input_ids=shifted, decoder_attention_mask=shifted_mask
        ).last_hidden_state
    torch.testing.assert_close(alone, explicit)
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model(inputs_embeds=model.embed_tokens(x))  # nothing to shift


@pytest.mark.parametrize("cls", [HfLmT5ForSequenceClassification, HfLmBartForSequenceClassification])
def test_sequence_classifier_pools_the_last_real_token_without_a_mask(cls):
    """Without an attention mask the padding is found from the pad id, as GPT's classifier does."""
    cfg = HfLmT5Config if cls is HfLmT5ForSequenceClassification else HfLmBartConfig
    model = cls(cfg(**SIZES, num_labels=3)).eval()
    x, mask = source()
    pad = model.config.pad_token_id
    x = x.masked_fill(mask == 0, pad)
    with torch.no_grad():
        out = model(input_ids=x[2:], output_hidden_states=True)  # row 2: 4 real tokens, then padding
    # pooled at index 3, the last real token, not at the last position
    torch.testing.assert_close(out.logits, model.classifier(out.decoder_hidden_states[-1][:, 3]))
    assert not torch.allclose(out.logits, model.classifier(out.decoder_hidden_states[-1][:, -1]))
