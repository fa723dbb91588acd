"""The recurrent LM (`hflm_rnn`): generation with the recurrent cache, padding, truncated BPTT,
scheduled sampling, Trainer, saving and remote code, errors, and learning."""

import json

import pytest
import torch
from conftest import parameters_after_one_trainer_step
from remote_code import shipped_files

from hf_lm import HfLmRNNConfig, HfLmRNNForCausalLM, HfLmRNNModel
from hf_lm.models.hflm_rnn_blocks import RNN_CELLS, RNN_IMPLEMENTATIONS, RecurrentCache

CELLS = sorted(RNN_CELLS)
V = 53


def tiny_config(**overrides) -> HfLmRNNConfig:
    kwargs = dict(
        vocab_size=V,
        cell_type="lstm",
        hidden_size=16,
        num_hidden_layers=2,
        hidden_dropout=0.0,
        initializer_range=0.3,  # large enough that greedy/beam choices are not near-ties
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    kwargs.update(overrides)
    return HfLmRNNConfig(**kwargs)


def lm(config=None, **overrides):
    torch.manual_seed(0)
    return HfLmRNNForCausalLM(config or tiny_config(**overrides)).eval()


def ids(b=2, t=8, seed=1):
    return torch.randint(3, V, (b, t), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- config and structure


def test_config_validates_every_field():
    bad = {
        "cell_type": "transformer",
        "rnn_implementation": "cudnn",
        "hidden_size": 0,
        "embedding_size": -1,
        "num_hidden_layers": 0,
        "vocab_size": 1.5,
        "hidden_dropout": 1.0,
        "initializer_range": -0.1,
        "forget_bias": "one",
        "tie_word_embeddings": "yes",
        "use_cache": None,
        "pad_token_id": V,
        "eos_token_id": [2, -1],
    }
    for field, value in bad.items():
        with pytest.raises(ValueError, match=field):
            tiny_config(**{field: value})
    assert tiny_config().embedding_size == 16 and tiny_config(embedding_size=8).embedding_size == 8


@pytest.mark.parametrize(
    "tie, emb, has_projection", [(True, 16, False), (True, 8, True), (False, 8, False), (False, 16, False)]
)
def test_tying_and_output_projection(tie, emb, has_projection):
    model = lm(tie_word_embeddings=tie, embedding_size=emb)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tie
    assert isinstance(model.output_projection, torch.nn.Linear) == has_projection
    assert model.lm_head.in_features == (emb if tie else 16)
    x = ids()
    out = model(x, output_hidden_states=True)
    assert out.logits.shape == (2, 8, V)
    torch.testing.assert_close(model.lm_head(model.output_projection(out.hidden_states[-1])), out.logits)


def test_init_is_uniform_with_forget_bias():
    model = lm(initializer_range=0.05, forget_bias=1.0, hidden_size=32)
    for name, p in model.named_parameters():
        if name.endswith("weight") or "weight_" in name:
            assert p.abs().max() <= 0.05 and p.std() > 0.02, name  # U(-r, r) has std r/sqrt(3)
    layer = model.model.rnn.layers[0]
    H = 32
    assert torch.all(layer.bias_ih[H : 2 * H] == 1.0) and torch.all(layer.bias_ih[:H] == 0)
    assert torch.all(layer.bias_hh == 0) and torch.all(model.lm_head.bias == 0)
    gru = lm(cell_type="gru", forget_bias=1.0)
    assert torch.all(gru.model.rnn.layers[0].bias_ih == 0)  # forget_bias is LSTM-only


# ---------------------------------------------------------------- forward, cache, causality


@pytest.mark.parametrize("cell_type", CELLS)
@pytest.mark.parametrize("implementation", RNN_IMPLEMENTATIONS)
def test_cached_steps_equal_the_full_forward(cell_type, implementation):
    model = lm(cell_type=cell_type, rnn_implementation=implementation)
    x = ids(t=9)
    with torch.no_grad():
        full = model(x, use_cache=False)
        assert full.past_key_values is None
        out = model(x[:, :4], use_cache=True)
        cache = out.past_key_values
        assert isinstance(cache, RecurrentCache) and cache.get_seq_length() == 4
        steps = [out.logits]
        for t in range(4, 9):
            steps.append(model(x[:, t : t + 1], past_key_values=cache, use_cache=True).logits)
    assert cache.get_seq_length() == 9
    torch.testing.assert_close(torch.cat(steps, 1), full.logits, rtol=1e-5, atol=1e-5)
    ref = lm(cell_type=cell_type, rnn_implementation="loop" if implementation == "fused" else "fused")
    with torch.no_grad():
        torch.testing.assert_close(ref(x).logits, full.logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cell_type", CELLS)
def test_no_leak_from_future_tokens(cell_type):
    model = lm(cell_type=cell_type)
    x = ids(1, 10)
    y = x.clone()
    y[0, 6] = (y[0, 6] + 1 - 3) % (V - 3) + 3
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[0, :6], b[0, :6], rtol=0, atol=0)
    assert not torch.allclose(a[0, 6:], b[0, 6:])


def test_hidden_states_and_tuple_output():
    model = lm(num_hidden_layers=3)
    x = ids()
    out = model(x, output_hidden_states=True)
    assert len(out.hidden_states) == 4  # embeddings + one per layer
    assert out.hidden_states[0].shape == (2, 8, 16)
    base = HfLmRNNModel(model.config).eval()
    base.load_state_dict(model.model.state_dict())
    torch.testing.assert_close(base(x).last_hidden_state, out.hidden_states[-1])
    as_tuple = model(x, return_dict=False)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], out.logits)


def test_dropout_only_in_training():
    model = lm(hidden_dropout=0.3).train()
    x = ids()
    assert not torch.allclose(model(x).logits, model(x).logits)
    model.eval()
    torch.testing.assert_close(model(x).logits, model(x).logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype):
    ref = lm()
    model = lm().to(dtype)
    x = ids()
    out = model(x, labels=x)
    assert out.logits.dtype == dtype and torch.isfinite(out.loss)
    assert (out.logits.float() - ref(x).logits).abs().max() < 0.1
    assert model.generate(x, max_new_tokens=3, do_sample=False).shape == (2, 11)


# ---------------------------------------------------------------- generation


@pytest.mark.parametrize("cell_type", CELLS)
@pytest.mark.parametrize(
    "mode",
    [
        dict(do_sample=False),
        dict(do_sample=False, num_beams=3, length_penalty=0.7, num_return_sequences=2),
        dict(do_sample=True, top_k=10, temperature=1.5, num_return_sequences=2),
    ],
    ids=["greedy", "beam", "sample"],
)
def test_cached_generation_equals_uncached(cell_type, mode):
    model = lm(cell_type=cell_type)
    x = ids(2, 5)
    kwargs = dict(max_new_tokens=7, min_new_tokens=7, **mode)
    torch.manual_seed(3)
    cached = model.generate(x, use_cache=True, **kwargs)
    torch.manual_seed(3)
    uncached = model.generate(x, use_cache=False, **kwargs)
    assert cached.shape[1] == 5 + 7
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("cell_type", CELLS)
@pytest.mark.parametrize("implementation", RNN_IMPLEMENTATIONS)
def test_left_padded_batch_generates_each_prompt_alone(cell_type, implementation):
    model = lm(cell_type=cell_type, rnn_implementation=implementation)
    prompts = [ids(1, 7, seed=2)[0], ids(1, 3, seed=3)[0], ids(1, 5, seed=4)[0]]
    width = max(len(p) for p in prompts)
    batch = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, p in enumerate(prompts):
        batch[i, width - len(p) :] = p
        mask[i, width - len(p) :] = 1
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
    together = model.generate(batch, attention_mask=mask, **kwargs)
    beams = model.generate(batch, attention_mask=mask, num_beams=2, **kwargs)
    for i, p in enumerate(prompts):
        assert torch.equal(together[i, width:], model.generate(p[None], **kwargs)[0, len(p) :]), i
        assert torch.equal(beams[i, width:], model.generate(p[None], num_beams=2, **kwargs)[0, len(p) :]), i


def test_generate_returns_and_continues_the_recurrent_cache():
    model = lm()
    x = ids(2, 5)
    out = model.generate(x, max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
    cache = out.past_key_values
    assert isinstance(cache, RecurrentCache)
    # the last generated token has not been fed yet: the cache holds everything before it
    assert cache.get_seq_length() == out.sequences.shape[1] - 1
    with torch.no_grad():
        ref = model(out.sequences).logits[:, -1]
        step = model(out.sequences[:, -1:], past_key_values=cache).logits[:, -1]
    torch.testing.assert_close(step, ref, rtol=1e-5, atol=1e-5)


def test_text_generation_pipeline_batches_with_left_padding():
    from transformers import pipeline

    from training.data.tokenizer import train_tokenizer

    tok = train_tokenizer(["hello world, the quick brown fox"] * 3, kind="char", vocab_size=40)
    model = lm(
        vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None
    )
    pipe = pipeline("text-generation", model=model, tokenizer=tok)
    prompts = ["hello", "the qu", "f"]
    # token ids, not text: the pipeline's text drops special tokens a random model may generate
    outs = pipe(
        prompts, max_new_tokens=5, min_new_tokens=5, do_sample=False, batch_size=3, return_tensors=True
    )
    for prompt, out in zip(prompts, outs):
        alone = model.generate(tok(prompt, return_tensors="pt").input_ids, max_new_tokens=5, min_new_tokens=5)
        ids, expected = list(out[0]["generated_token_ids"]), alone[0].tolist()
        padding = len(ids) - len(expected)  # the batch's left padding
        assert ids[padding:] == expected and set(ids[:padding]) <= {tok.pad_token_id}


def test_assisted_generation_is_refused_clearly():
    model = lm()
    with pytest.raises(ValueError, match="stateful"):
        model.generate(ids(1, 4), max_new_tokens=3, do_sample=False, assistant_model=lm())


# ---------------------------------------------------------------- truncated BPTT


@pytest.mark.parametrize("cell_type", CELLS)
def test_truncated_bptt_blocks_equal_the_concatenation(cell_type):
    model = lm(cell_type=cell_type).train()  # training mode: use_cache=True must still return the state
    x = ids(3, 12)
    full = model(x, use_cache=True)
    first = model(x[:, :5], use_cache=True)
    assert model(x[:, :5]).past_key_values is None  # in training the cache is opt-in
    cache = first.past_key_values.detach()
    assert cache.get_seq_length() == 5 and not cache.state[0].requires_grad
    second = model(x[:, 5:], past_key_values=cache, use_cache=True)
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), full.logits, rtol=1e-5, atol=1e-5)
    for a, b in zip(second.past_key_values.state, full.past_key_values.state):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # the detached state cuts the graph: each block's backward stays inside the block
    first.logits.square().mean().backward()
    second.logits.square().mean().backward()  # would fail ("backward through the graph a second time") if attached
    assert all(p.grad is not None for p in model.parameters())


def test_truncated_bptt_without_detach_reaches_back():
    model = lm().train()
    x = ids(2, 8)
    first = model(x[:, :4], use_cache=True)
    first.logits.sum().backward(retain_graph=False)
    second = model(x[:, 4:], past_key_values=first.past_key_values, use_cache=True)
    with pytest.raises(RuntimeError, match="second time"):
        second.logits.sum().backward()


# ---------------------------------------------------------------- scheduled sampling


def one_hot_head(model, token):
    """Make the model's prediction a certainty: every sampled token is `token`."""
    with torch.no_grad():
        model.lm_head.bias.fill_(-50.0)  # the other tokens get probability < e^-90
        model.lm_head.bias[token] = 50.0
    return model


def test_scheduled_sampling_zero_none_and_eval_are_teacher_forcing():
    model = lm(hidden_dropout=0.2).train()
    x = ids()
    results = []
    for p in (None, 0.0, 0):
        torch.manual_seed(7)
        results.append(model(x, labels=x, scheduled_sampling_probability=p))
    for r in results[1:]:
        assert torch.equal(r.logits, results[0].logits) and torch.equal(r.loss, results[0].loss)
    model.eval()
    torch.testing.assert_close(
        model(x, labels=x, scheduled_sampling_probability=1.0).logits, model(x).logits, rtol=0, atol=0
    )
    model.train()  # without labels (not a training step) it is teacher forcing too
    torch.manual_seed(7)
    no_labels = model(x, scheduled_sampling_probability=1.0)
    torch.manual_seed(7)
    assert torch.equal(no_labels.logits, model(x).logits)


@pytest.mark.parametrize("cell_type", CELLS)
def test_scheduled_sampling_feeds_the_models_own_samples(cell_type):
    model = one_hot_head(
        lm(cell_type=cell_type), token=5
    ).train()  # dropout is 0: train mode is deterministic
    x = ids(2, 6)
    out = model(x, labels=x, scheduled_sampling_probability=1.0)
    forced = x.clone()
    forced[:, 1:] = 5  # every input after the first is the model's own (certain) prediction
    with torch.no_grad():
        expected = model(forced).logits
        teacher = model(x).logits
    torch.testing.assert_close(out.logits, expected, rtol=1e-5, atol=1e-4)
    # the first input is kept (another kernel computes it: rounding apart, as another CPU may round)
    torch.testing.assert_close(out.logits[:, 0], teacher[:, 0], rtol=1e-6, atol=1e-5)
    # ... and still trains: finite loss, gradients everywhere
    assert torch.isfinite(out.loss)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_scheduled_sampling_flips_one_coin_per_token():
    model = one_hot_head(lm(), token=2).train()  # 2 never occurs in `ids`
    x = ids(400, 2)
    forced = x.clone()
    forced[:, 1] = 2
    torch.manual_seed(0)
    out = model(x, labels=x, scheduled_sampling_probability=0.3)
    with torch.no_grad():
        teacher, sampled = model(x).logits[:, 1], model(forced).logits[:, 1]
    is_teacher = torch.isclose(out.logits[:, 1], teacher, rtol=0, atol=1e-4).all(-1)
    is_sampled = torch.isclose(out.logits[:, 1], sampled, rtol=0, atol=1e-4).all(-1)
    assert torch.all(is_teacher ^ is_sampled)  # each row saw exactly one of the two inputs
    assert 0.2 < is_sampled.float().mean() < 0.4


def test_scheduled_sampling_is_seeded_reproducible():
    model = lm(hidden_dropout=0.1).train()
    x = ids(4, 10)
    torch.manual_seed(11)
    a = model(x, labels=x, scheduled_sampling_probability=0.5)
    torch.manual_seed(11)
    b = model(x, labels=x, scheduled_sampling_probability=0.5)
    torch.manual_seed(12)
    c = model(x, labels=x, scheduled_sampling_probability=0.5)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.loss, b.loss)
    assert not torch.equal(a.logits, c.logits)


def test_scheduled_sampling_respects_left_padding_and_the_cache():
    model = one_hot_head(lm(), token=5).train()
    row = ids(1, 4)[0]
    batch = torch.stack([torch.cat([torch.zeros(3, dtype=torch.long), row]), ids(1, 7, seed=9)[0]])
    mask = torch.ones_like(batch)
    mask[0, :3] = 0
    labels = batch.masked_fill(mask == 0, -100)
    padded = model(
        batch, attention_mask=mask, labels=labels, scheduled_sampling_probability=1.0, use_cache=True
    )
    alone = model(row[None], labels=row[None], scheduled_sampling_probability=1.0, use_cache=True)
    # the first real token is never replaced (there is no real prediction before it), the rest are
    torch.testing.assert_close(padded.logits[0, 3:], alone.logits[0], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(padded.past_key_values.state[0][:, 0], alone.past_key_values.state[0][:, 0])
    assert padded.past_key_values.get_seq_length() == 7


# ---------------------------------------------------------------- losses and Trainer


def test_loss_is_shifted_cross_entropy():
    """(`num_items_in_batch`: tests/test_model_properties.py.)"""
    model = lm()
    x = ids(4, 8)
    labels = x.clone()
    labels[0, 3] = -100
    out = model(x, labels=labels)
    ref = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, ref)


def test_trainer_gradient_accumulation_matches_full_batch(tmp_path):
    from datasets import Dataset

    x = ids(8, 10)
    data = Dataset.from_dict({"input_ids": x.tolist(), "labels": x.tolist()})
    full, accumulated = parameters_after_one_trainer_step(
        lambda: lm().train(), data, tmp_path, learning_rate=1e-1
    )
    assert not torch.equal(full, torch.cat([p.detach().flatten() for p in lm().parameters()]))
    torch.testing.assert_close(full, accumulated, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- errors


def test_clear_errors():
    model = lm()
    x = ids()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[3, V]]))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(0, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="exactly one"):
        model()
    with pytest.raises(ValueError, match="attention_mask"):
        model(x, attention_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="position_ids"):
        model(x, position_ids=torch.arange(5)[None])
    with pytest.raises(ValueError, match="labels"):
        model(x, labels=x[:, :4])
    with pytest.raises(ValueError, match="RecurrentCache"):
        model(x, past_key_values=(torch.zeros(2, 2, 16),))
    cache = model(x, use_cache=True).past_key_values
    with pytest.raises(ValueError, match="batch size 2"):
        model(ids(3, 2), past_key_values=cache)
    with pytest.raises(ValueError, match="scheduled_sampling_probability"):
        model.train()(x, labels=x, scheduled_sampling_probability=1.5)
    with pytest.raises(ValueError, match="inputs_embeds"):
        model(inputs_embeds=torch.randn(2, 3, 7))


# ---------------------------------------------------------------- save, load, remote code

SHIPPED_RNN_FILES = {
    "hflm_common.py",
    "hflm_inputs.py",
    "hflm_losses.py",
    "hflm_pretrained.py",
    "hflm_configuration_rnn.py",
    "hflm_modeling_rnn.py",
    "hflm_rnn_blocks.py",
}


@pytest.mark.parametrize("tie", [True, False])
def test_save_and_load_round_trip(tmp_path, tie):
    model = lm(tie_word_embeddings=tie, embedding_size=12, cell_type="gru")
    model.save_pretrained(tmp_path)
    loaded, info = HfLmRNNForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    x = ids()
    torch.testing.assert_close(loaded.eval()(x).logits, model(x).logits, rtol=0, atol=0)
    # the code it ships (imports and loading as remote code: tests/test_model_properties.py)
    assert shipped_files(tmp_path) == SHIPPED_RNN_FILES
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "hflm_configuration_rnn.HfLmRNNConfig",
        "AutoModel": "hflm_modeling_rnn.HfLmRNNModel",
        "AutoModelForCausalLM": "hflm_modeling_rnn.HfLmRNNForCausalLM",
    }
    assert "- hflm_rnn" in (tmp_path / "README.md").read_text()


# ---------------------------------------------------------------- learning


def test_tiny_lstm_learns_a_repeating_sequence():
    torch.manual_seed(0)
    pattern = [3, 9, 4, 9, 7, 5]  # 9 is followed by 4 or 7: the model must remember one step back
    model = HfLmRNNForCausalLM(
        tiny_config(hidden_size=32, num_hidden_layers=1, initializer_range=0.1)
    ).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    stream = torch.tensor(pattern * 12)
    batch = torch.stack([stream[i : i + 24] for i in range(6)])  # every phase of the pattern
    for _ in range(100):
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # the floor: 2 of the 6 rows open on a 9 (next token 4 or 7 equally likely): 2 * ln 2 / 138 = 0.01.
    # The loss crosses 0.1 after 36-65 steps over seeds 0-7 (60 steps failed seed 6) and is 0.013-0.018
    # after 100
    assert loss.item() < 0.1
    model.eval()
    prompt = torch.tensor([pattern[:3]])
    out = model.generate(prompt, max_new_tokens=12, do_sample=False)
    assert out[0].tolist() == (pattern * 3)[:15]
