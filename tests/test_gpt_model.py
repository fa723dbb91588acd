"""Behaviour of the hflm_gpt family over the variant grid: causality, caching, padding, generation,
outputs, dtypes, losses and errors."""

import pytest
import torch
from conftest import parameters_after_one_trainer_step, tiny_gpt_config
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    DynamicCache,
)

from hf_lm import (
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmGPTForSequenceClassification,
    HfLmGPTModel,
    kv_cache_bytes,
)


def lm(config, impl="sdpa"):
    model = HfLmGPTForCausalLM(config).eval()
    model.config._attn_implementation = impl
    return model


def ids(b=2, t=10, vocab=97, low=3):
    return torch.randint(low, vocab, (b, t))


# ---------------------------------------------------------------- causality and attention paths


def test_no_causal_leak(variant_config):
    """Changing a future token never changes the logits of earlier positions."""
    model = lm(variant_config)
    x = ids()
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 5) % 90 + 3
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_sdpa_and_eager_paths_agree(variant_config):
    x = ids()
    mask = torch.ones_like(x)
    mask[0, :3] = 0  # left padding
    model = lm(variant_config, "sdpa")
    with torch.no_grad():
        a = model(x, attention_mask=mask).logits
        model.config._attn_implementation = "eager"
        b = model(x, attention_mask=mask).logits
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_attn_implementation_from_pretrained_argument(tmp_path):
    lm(tiny_gpt_config()).save_pretrained(tmp_path)
    assert (
        HfLmGPTForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").config._attn_implementation
        == "eager"
    )
    assert HfLmGPTForCausalLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"


# ---------------------------------------------------------------- KV cache


def test_cache_equals_full_forward(variant_config):
    """Prefill then token-by-token decoding with a DynamicCache gives the uncached logits."""
    model = lm(variant_config)
    x = ids(t=12)
    with torch.no_grad():
        full = model(x, use_cache=False).logits
        out = model(x[:, :5], use_cache=True)
        cache = out.past_key_values
        assert isinstance(cache, DynamicCache) and cache.get_seq_length() == 5
        steps = [out.logits]
        for t in range(5, 12, 3):  # chunks of several new tokens too
            out = model(x[:, t : t + 3], past_key_values=cache, use_cache=True)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["greedy", "beam", "sample"])
def test_generate_cached_equals_uncached(variant_config, mode):
    model = lm(variant_config)
    x = ids(b=2, t=6)
    kwargs = dict(max_new_tokens=8, min_new_tokens=8, pad_token_id=0)
    kwargs.update(
        {
            "greedy": dict(do_sample=False),
            "beam": dict(do_sample=False, num_beams=3, length_penalty=0.7, num_return_sequences=2),
            "sample": dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9),
        }[mode]
    )
    torch.manual_seed(1)
    a = model.generate(x, use_cache=True, **kwargs)
    torch.manual_seed(1)
    b = model.generate(x, use_cache=False, **kwargs)
    assert a.shape[1] == 6 + 8
    assert torch.equal(a, b)


def test_left_padded_batch_equals_each_prompt_alone(variant_config):
    model = lm(variant_config)
    prompts = [ids(1, 7)[0], ids(1, 3)[0], ids(1, 5)[0]]
    width = max(len(p) for p in prompts)
    batch = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, p in enumerate(prompts):
        batch[i, width - len(p) :] = p
        mask[i, width - len(p) :] = 1
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    together = model.generate(batch, attention_mask=mask, **kwargs)
    for i, p in enumerate(prompts):
        alone = model.generate(p[None], **kwargs)
        assert torch.equal(together[i, width:], alone[0, len(p) :]), f"prompt {i} differs"


def test_static_cache_equals_full_forward(variant_config):
    """A preallocated StaticCache: its empty slots (zeros after the current token) must stay invisible."""
    from transformers import StaticCache

    model = lm(variant_config)
    x = ids(t=9)
    with torch.no_grad():
        full = model(x, use_cache=False).logits
        cache = StaticCache(config=model.config, max_cache_len=16)
        steps = [model(x[:, :5], past_key_values=cache, use_cache=True).logits]
        for t in range(5, 9):
            steps.append(model(x[:, t : t + 1], past_key_values=cache, use_cache=True).logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_static_cache_generation_equals_dynamic(variant_config):
    """A preallocated cache (what torch.compile'd generation uses) hides its empty slots: same tokens."""
    model = lm(variant_config)
    x = ids(2, 6)
    mask = torch.ones_like(x)
    mask[0, :2] = 0  # left padding too
    for attention_mask in (mask, None):  # None: the unpadded fast paths must not see the empty slots
        kwargs = dict(
            attention_mask=attention_mask, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0
        )
        dynamic = model.generate(x, **kwargs)
        static = model.generate(x, cache_implementation="static", **kwargs)
        assert torch.equal(dynamic, static)


def test_eos_stops_generation():
    model = lm(tiny_gpt_config())
    x = ids(1, 5)
    free = model.generate(x, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    stop_token = int(free[0, 7])  # make the third generated token the EOS
    stopped = model.generate(x, max_new_tokens=6, do_sample=False, eos_token_id=stop_token, pad_token_id=0)
    first = (free[0, 5:] == stop_token).nonzero()[0, 0].item()
    assert stopped.shape[1] == 5 + first + 1
    assert int(stopped[0, -1]) == stop_token


def test_kv_cache_bytes_matches_the_real_cache():
    for nkv in (4, 2, 1):
        config = tiny_gpt_config(num_key_value_heads=nkv)
        model = lm(config)
        with torch.no_grad():
            cache = model(ids(3, 11), use_cache=True).past_key_values
        real = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
        assert kv_cache_bytes(config, 3, 11, torch.float32) == real
    mha = tiny_gpt_config()
    assert kv_cache_bytes(mha, 1, 100) == 2 * kv_cache_bytes(tiny_gpt_config(num_key_value_heads=2), 1, 100)
    assert kv_cache_bytes(mha, 1, 100) == 4 * kv_cache_bytes(tiny_gpt_config(num_key_value_heads=1), 1, 100)
    assert kv_cache_bytes(mha, 1, 100, "bfloat16") * 2 == kv_cache_bytes(mha, 1, 100, torch.float32)


# ---------------------------------------------------------------- prefix LM


def test_prefix_lm_mask_makes_the_prefix_bidirectional():
    model = lm(tiny_gpt_config(position_embedding_type="rope"))
    x = ids(1, 8)
    y = x.clone()
    y[0, 2] = (y[0, 2] + 1) % 90 + 3  # change a token inside the prefix
    z = x.clone()
    z[0, 5] = (z[0, 5] + 1) % 90 + 3  # change a token after the prefix
    p = torch.tensor([3])
    with torch.no_grad():
        a, b, c = (model(t, prefix_lengths=p).logits for t in (x, y, z))
    assert not torch.allclose(a[0, 0], b[0, 0])  # position 0 sees prefix token 2
    torch.testing.assert_close(a[0, :5], c[0, :5])  # ... but nothing after the prefix leaks back
    # in a one-layer model, rows after the prefix see exactly the causal keys, so they match causal attention
    one = lm(tiny_gpt_config(position_embedding_type="rope", num_hidden_layers=1))
    with torch.no_grad():
        torch.testing.assert_close(one(x, prefix_lengths=p).logits[0, 3:], one(x).logits[0, 3:])
        assert not torch.allclose(one(x, prefix_lengths=p).logits[0, :2], one(x).logits[0, :2])


# ---------------------------------------------------------------- outputs, checkpointing, dtypes


def test_output_attentions_and_hidden_states(variant_config):
    model = lm(variant_config)  # sdpa model: attentions come from the eager path on request
    x = ids(2, 9)
    out = model(x, output_attentions=True, output_hidden_states=True)
    L, nh = variant_config.num_hidden_layers, variant_config.num_attention_heads
    assert len(out.attentions) == L and out.attentions[0].shape == (2, nh, 9, 9)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(2, nh, 9))
    assert torch.all(out.attentions[1].triu(1) == 0)  # causal
    assert len(out.hidden_states) == L + 1
    torch.testing.assert_close(model.lm_head(out.hidden_states[-1]), out.logits)
    tuple_out = model(x, return_dict=False)
    assert isinstance(tuple_out, tuple)
    torch.testing.assert_close(tuple_out[0], out.logits)


def test_dropout_is_active_only_in_training():
    model = HfLmGPTForCausalLM(tiny_gpt_config(hidden_dropout=0.3, attention_dropout=0.3))
    x = ids()
    model.train()
    assert not torch.allclose(model(x).logits, model(x).logits)
    model.eval()
    torch.testing.assert_close(model(x).logits, model(x).logits)


# ---------------------------------------------------------------- losses


def test_loss_is_shifted_cross_entropy_and_ignores_minus_100():
    model = lm(tiny_gpt_config())
    x = ids()
    labels = x.clone()
    labels[0, 4] = -100
    out = model(x, labels=labels)
    logits, target = out.logits[:, :-1].reshape(-1, 97), labels[:, 1:].reshape(-1)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(logits, target, ignore_index=-100))


def test_trainer_gradient_accumulation_matches_full_batch(tmp_path):
    """Trainer passes num_items_in_batch and stops dividing by the accumulation steps (transformers 5)."""
    from datasets import Dataset

    x = ids(8, 12)
    data = Dataset.from_dict({"input_ids": x.tolist(), "labels": x.tolist()})
    full, accumulated = parameters_after_one_trainer_step(
        lambda: HfLmGPTForCausalLM(tiny_gpt_config()), data, tmp_path
    )
    torch.testing.assert_close(full, accumulated, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- sequence classification


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_sequence_classification_pools_the_last_real_token(padding_side):
    config = tiny_gpt_config(num_labels=3)
    model = HfLmGPTForSequenceClassification(config).eval()
    x = ids(1, 6)
    padded = torch.zeros(1, 9, dtype=torch.long)
    mask = torch.zeros(1, 9, dtype=torch.long)
    sl = slice(3, 9) if padding_side == "left" else slice(0, 6)
    padded[0, sl], mask[0, sl] = x[0], 1
    with torch.no_grad():
        torch.testing.assert_close(
            model(x).logits, model(padded, attention_mask=mask).logits, rtol=1e-5, atol=1e-5
        )
        # without a mask, the pad token id marks padding (right padding)
        if padding_side == "right":
            torch.testing.assert_close(model(x).logits, model(padded).logits, rtol=1e-5, atol=1e-5)


def test_sequence_classification_losses():
    x = ids(4, 6)
    model = HfLmGPTForSequenceClassification(tiny_gpt_config(num_labels=3))
    out = model(x, labels=torch.tensor([0, 2, 1, 1]))
    torch.testing.assert_close(
        out.loss, torch.nn.functional.cross_entropy(out.logits, torch.tensor([0, 2, 1, 1]))
    )
    reg = HfLmGPTForSequenceClassification(tiny_gpt_config(num_labels=1))
    out = reg(x, labels=torch.tensor([0.5, 1.0, -1.0, 2.0]))
    assert reg.config.problem_type == "regression" and out.logits.shape == (4, 1)
    multi = HfLmGPTForSequenceClassification(tiny_gpt_config(num_labels=3))
    y = torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 1], [0, 0, 0]])
    out = multi(x, labels=y)
    assert multi.config.problem_type == "multi_label_classification"
    torch.testing.assert_close(out.loss, torch.nn.functional.binary_cross_entropy_with_logits(out.logits, y))
    with pytest.raises(ValueError, match="class ids"):
        model(x, labels=torch.tensor([0, 3, 1, 1]))


# ---------------------------------------------------------------- Auto classes


def test_auto_classes(tmp_path):
    config = AutoConfig.for_model(
        "hflm_gpt", vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2
    )
    assert isinstance(config, HfLmGPTConfig)
    assert isinstance(AutoModelForCausalLM.from_config(config), HfLmGPTForCausalLM)
    assert isinstance(
        AutoModelForSequenceClassification.from_config(config), HfLmGPTForSequenceClassification
    )
    model = lm(tiny_gpt_config())
    model.save_pretrained(tmp_path)
    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, HfLmGPTModel)
    x = ids()
    torch.testing.assert_close(base(x).last_hidden_state, model.model(x).last_hidden_state)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(hidden_size=30), "hidden_size"),
        (dict(num_key_value_heads=3), "num_key_value_heads"),
        (dict(num_key_value_heads=8), "num_key_value_heads"),
        (dict(hidden_act="swish"), "hidden_act"),
        (dict(position_embedding_type="relative"), "position_embedding_type"),
        (dict(norm_type="batchnorm"), "norm_type"),
        (dict(norm_position="sandwich"), "norm_position"),
        (dict(num_hidden_layers=0), "num_hidden_layers"),
        (dict(vocab_size=-1), "vocab_size"),
        (dict(hidden_dropout=1.5), "hidden_dropout"),
        (dict(attention_dropout=-0.1), "attention_dropout"),
        (dict(position_embedding_type="rope", head_dim=7), "head_dim"),
        (dict(position_embedding_type="sinusoidal", hidden_size=33, num_attention_heads=3), "hidden_size"),
        (dict(rope_theta=0.0), "rope_theta"),
        (dict(norm_eps=0), "norm_eps"),
        (dict(eos_token_id=97), "eos_token_id"),
        (dict(pad_token_id=-1), "pad_token_id"),
        (dict(tie_word_embeddings="yes"), "tie_word_embeddings"),
        (dict(max_position_embeddings=0), "max_position_embeddings"),
        (dict(intermediate_size=0), "intermediate_size"),
    ],
)
def test_invalid_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        tiny_gpt_config(**overrides)


def test_bad_inputs_get_clear_errors():
    model = lm(tiny_gpt_config())  # learned positions, 64 of them
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[5, 97]]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[5, -3]]))
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        model(ids(1, 65))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids(2, 5), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="position_ids"):
        model(ids(2, 5), position_ids=torch.arange(4)[None])
    with pytest.raises(ValueError, match="labels"):
        model(ids(2, 5), labels=ids(2, 4))
    with pytest.raises(ValueError, match="labels"):
        model(ids(2, 5), labels=torch.full((2, 5), 200))
    with pytest.raises(ValueError, match="exactly one"):
        model()
    with pytest.raises(ValueError, match="integer"):
        model(torch.zeros(1, 3))
    # the cache counts towards the learned-position limit, so generation past it fails clearly
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.generate(ids(1, 60), max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
    # schemes without a table extrapolate
    rope = lm(tiny_gpt_config(position_embedding_type="rope"))
    assert rope(ids(1, 80)).logits.shape == (1, 80, 97)


def test_document_ids_keep_attention_inside_each_packed_document():
    """A block packed from two documents behaves like the two documents run separately."""
    model = lm(tiny_gpt_config(position_embedding_type="rope"))
    a, b = ids(1, 5), ids(1, 7)
    packed = torch.cat([a, b], dim=1)
    docs = torch.tensor([[0] * 5 + [1] * 7])
    positions = torch.cat([torch.arange(5), torch.arange(7)])[None]  # restart at each document
    with torch.no_grad():
        out = model(packed, document_ids=docs, position_ids=positions).logits
        torch.testing.assert_close(out[:, :5], model(a).logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[:, 5:], model(b).logits, rtol=1e-5, atol=1e-5)
        # without document_ids, the second document sees the first
        assert not torch.allclose(model(packed, position_ids=positions).logits[:, 5:], model(b).logits)
        model.config._attn_implementation = "eager"
        torch.testing.assert_close(
            model(packed, document_ids=docs, position_ids=positions).logits, out, rtol=1e-5, atol=1e-5
        )
    with pytest.raises(ValueError, match="document_ids"):
        model(packed, document_ids=docs[:, :5])


def test_padding_free_packed_rows_keep_sequences_apart_as_in_transformers():
    """transformers' `DataCollatorWithFlattening` (TRL's `padding_free`) lays sequences end to end
    with positions restarting at each and no attention mask. Without a cache (training), transformers'
    decoders keep attention inside each sequence, and so does hf_lm: the logits and loss of
    transformers' Llama on the same weights, and each sequence's logits alone. With a mask, or a
    cache, the positions are only positions, as in transformers."""
    from test_gpt_convert import llama_config, randomize
    from transformers import DataCollatorWithFlattening, LlamaForCausalLM

    from hf_lm.convert import from_transformers

    reference = randomize(LlamaForCausalLM(llama_config()))
    model = from_transformers(reference).eval()
    torch.manual_seed(0)
    seqs = [torch.randint(3, reference.config.vocab_size, (n,)).tolist() for n in (5, 7, 3)]
    batch = DataCollatorWithFlattening()([{"input_ids": s} for s in seqs])
    assert "attention_mask" not in batch and batch["position_ids"][0, 5] == 0
    with torch.no_grad():
        out, expected = model(**batch, use_cache=False), reference(**batch, use_cache=False)
        torch.testing.assert_close(out.logits, expected.logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.loss, expected.loss, rtol=1e-5, atol=1e-6)
        start = 0
        for seq in seqs:
            alone = model(torch.tensor([seq])).logits
            torch.testing.assert_close(out.logits[:, start : start + len(seq)], alone, rtol=1e-5, atol=1e-5)
            start += len(seq)
        masked = model(**batch, attention_mask=torch.ones_like(batch["input_ids"]), use_cache=False)
        torch.testing.assert_close(
            masked.logits,
            reference(**batch, attention_mask=torch.ones_like(batch["input_ids"]), use_cache=False).logits,
            rtol=1e-5,
            atol=1e-5,
        )
        assert not torch.allclose(
            masked.logits, out.logits, atol=1e-3
        )  # there, later sequences see earlier ones


# ---------------------------------------------------------------- ALBERT's options: factorized embeddings, shared blocks

# E < C (tied and untied heads, positions added at width E), shared blocks (one, or two over four
# layers), and both at once, over several position schemes and attention kinds
ALBERT_VARIANTS = {
    "factorized_tied": dict(embedding_size=16),
    "factorized_untied_sinusoidal": dict(
        embedding_size=12, tie_word_embeddings=False, position_embedding_type="sinusoidal"
    ),
    "shared_one_block": dict(num_hidden_layers=3, num_hidden_groups=1),
    "shared_two_groups_rope_gqa": dict(
        num_hidden_layers=4, num_hidden_groups=2, position_embedding_type="rope", num_key_value_heads=2
    ),
    "albert_alibi_swiglu": dict(
        embedding_size=8,
        num_hidden_layers=3,
        num_hidden_groups=1,
        position_embedding_type="alibi",
        hidden_act="swiglu",
    ),
}


@pytest.fixture(params=sorted(ALBERT_VARIANTS))
def albert_config(request):
    return tiny_gpt_config(**ALBERT_VARIANTS[request.param])


def test_factorized_tied_head_maps_hidden_to_embedding_to_vocab():
    """E < C: a V x E table and an E -> C projection in; C -> E (a learned bias-free Linear) then
    the tied V x E matrix out, so tying still works and the vocabulary costs V*E, not V*C."""
    V, C, E, P = 97, 32, 16, 64
    model = lm(tiny_gpt_config(embedding_size=E))
    embed = model.model.embed_tokens.weight
    assert embed.shape == (V, E) and model.lm_head.weight is embed  # tied
    assert model.model.positions.embeddings.weight.shape == (P, E)  # positions live at width E too
    assert model.model.embed_proj.weight.shape == (C, E) and model.model.embed_proj.bias is not None
    assert model.output_projection.weight.shape == (E, C) and model.output_projection.bias is None
    x = ids()
    out = model(x, output_hidden_states=True)
    last = out.hidden_states[-1]  # (B, T, C) after the final norm
    assert last.shape == (2, 10, C) and out.logits.shape == (2, 10, V)
    torch.testing.assert_close(out.logits, (last @ model.output_projection.weight.T) @ embed.T)
    # exactly the parameters factorization saves: V*(C-E) + P*(C-E), minus both projections
    full = lm(tiny_gpt_config())
    saved = V * (C - E) + P * (C - E) - (E * C + C) - C * E
    assert full.num_parameters() - model.num_parameters() == saved
    # untied: the head reads the C-wide state directly (V x C), the input side stays factorized
    untied = lm(tiny_gpt_config(embedding_size=E, tie_word_embeddings=False))
    assert isinstance(untied.output_projection, torch.nn.Identity) and untied.lm_head.weight.shape == (V, C)
    assert untied.num_parameters() == model.num_parameters() - C * E + V * C


def test_shared_blocks_really_share_parameters():
    L, G = 4, 2
    shared = lm(tiny_gpt_config(num_hidden_layers=L, num_hidden_groups=G))
    unshared = lm(tiny_gpt_config(num_hidden_layers=L))
    assert len(shared.model.layers) == G and shared.model.layer_to_block == [0, 0, 1, 1]
    per_block = sum(p.numel() for p in unshared.model.layers[0].parameters())
    # a shared block counts once, in num_parameters and in the state dict
    assert unshared.num_parameters() - shared.num_parameters() == (L - G) * per_block
    assert not any(k.startswith(("model.layers.2.", "model.layers.3.")) for k in shared.state_dict())
    # the forward is the embeddings run through block 0, 0, 1, 1 (then the final norm)
    x = ids()
    with torch.no_grad():
        h = shared.model.embed_tokens(x) + shared.model.positions.embed(torch.arange(10)[None], torch.float32)
        for block in (0, 0, 1, 1):
            h = shared.model.layers[block](h, is_causal=True)[0]
        torch.testing.assert_close(shared.model(x).last_hidden_state, shared.model.norm(h))
    # one gradient per shared block, accumulated over the layers that run it
    shared.train()
    shared(x, labels=x).loss.backward()
    assert all(p.grad is not None for p in shared.parameters())


def test_shared_blocks_keep_one_cache_slot_per_layer():
    model = lm(tiny_gpt_config(num_hidden_layers=3, num_hidden_groups=1))
    out = model(ids(t=6), use_cache=True)
    cache = out.past_key_values
    assert len(cache.layers) == 3 and cache.get_seq_length() == 6
    # the same block sees different inputs at each depth, so each layer caches different keys
    assert not torch.allclose(cache.layers[0].keys, cache.layers[1].keys)
    assert kv_cache_bytes(model.config, 2, 6, torch.float32) == sum(
        layer.keys.nbytes + layer.values.nbytes for layer in cache.layers
    )


def test_albert_options_no_causal_leak_and_cache_equals_full_forward(albert_config):
    model = lm(albert_config)
    x = ids(t=12)
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 5) % 90 + 3
    with torch.no_grad():
        full = model(x, use_cache=False).logits
        torch.testing.assert_close(model(y).logits[:, :6], full[:, :6], rtol=0, atol=1e-6)
        out = model(x[:, :5], use_cache=True)
        steps = [out.logits]
        for t in range(5, 12, 3):
            out = model(x[:, t : t + 3], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["greedy", "beam", "sample"])
def test_albert_options_generate_cached_equals_uncached(albert_config, mode):
    model = lm(albert_config)
    x = ids(b=2, t=6)
    mask = torch.ones_like(x)
    mask[0, :2] = 0  # left padding
    kwargs = dict(attention_mask=mask, max_new_tokens=8, min_new_tokens=8, pad_token_id=0)
    kwargs.update(
        {
            "greedy": dict(do_sample=False),
            "beam": dict(do_sample=False, num_beams=3, num_return_sequences=2),
            "sample": dict(do_sample=True, temperature=0.8, top_k=20),
        }[mode]
    )
    torch.manual_seed(1)
    a = model.generate(x, use_cache=True, **kwargs)
    torch.manual_seed(1)
    b = model.generate(x, use_cache=False, **kwargs)
    assert a.shape[1] == 6 + 8 and torch.equal(a, b)
    if mode == "greedy":  # a preallocated cache too
        assert torch.equal(model.generate(x, cache_implementation="static", **kwargs), a)


def test_albert_options_activation_checkpointing_gives_the_same_gradients():
    model = HfLmGPTForCausalLM(
        tiny_gpt_config(embedding_size=16, num_hidden_layers=3, num_hidden_groups=1)
    ).train()
    x = ids()
    model(x, labels=x).loss.backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.activation_checkpointing_enable()
    model(x, labels=x).loss.backward()
    for a, p in zip(ref, model.parameters()):
        torch.testing.assert_close(a, p.grad)


def test_albert_options_save_and_load(tmp_path):
    from safetensors import safe_open

    config = tiny_gpt_config(embedding_size=16, num_hidden_layers=3, num_hidden_groups=1)
    model = lm(config)
    model.save_pretrained(tmp_path / "local")
    loaded, info = HfLmGPTForCausalLM.from_pretrained(tmp_path / "local", output_loading_info=True)
    assert not any(info.values()), info
    assert loaded.config.embedding_size == 16 and loaded.config.num_hidden_groups == 1
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    x = ids()
    torch.testing.assert_close(loaded.eval()(x).logits, model(x).logits, rtol=0, atol=0)
    with safe_open(tmp_path / "local" / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "lm_head.weight" not in keys and "output_projection.weight" in keys  # the tied matrix once
    assert {k.split(".")[2] for k in keys if k.startswith("model.layers.")} == {"0"}  # one block stored


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(embedding_size=0), "embedding_size"),
        (dict(embedding_size=16.0), "embedding_size"),
        (dict(num_hidden_groups=3), "num_hidden_groups"),
        (dict(num_hidden_groups=0), "num_hidden_groups"),
        (dict(position_embedding_type="sinusoidal", embedding_size=15), "embedding_size"),
    ],
)
def test_invalid_albert_options_raise_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        tiny_gpt_config(**overrides)


def test_families_without_albert_options_refuse_them():
    from hf_lm import HfLmT5Config

    small = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    assert HfLmT5Config(**small).embedding_size is None  # nothing filled in where it means nothing
    HfLmT5Config(**small, embedding_size=32, num_hidden_groups=2)  # the values that change nothing
    with pytest.raises(ValueError, match="`embedding_size` is not supported"):
        HfLmT5Config(**small, embedding_size=16)
    with pytest.raises(ValueError, match="`num_hidden_groups` is not supported"):
        HfLmT5Config(**small, num_hidden_groups=1)
