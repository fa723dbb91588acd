"""Mixture-of-experts feed-forward (`num_local_experts`): routing against a per-token loop, capacity
dropping, the load-balancing loss by hand, parity with transformers' Mixtral and SwitchTransformers,
cached generation, save/load, the Trainer and bad config values.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    MixtralConfig,
    MixtralForCausalLM,
    SwitchTransformersConfig,
    SwitchTransformersForConditionalGeneration,
    Trainer,
    TrainingArguments,
)
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBertConfig,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmGPTForSequenceClassification,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
    HfLmT5ForMaskPredict,
    HfLmT5ForSequenceClassification,
)
from hf_lm.convert import from_transformers
from hf_lm.models.hflm_layers import (
    SparseMoE,
    load_balancing_loss,
    router_z_loss,
)

VOCAB = 97


def gpt_config(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64)  # fmt: skip
    return HfLmGPTConfig(**{**base, **kw})


def t5_config(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                num_local_experts=4, num_experts_per_tok=1, norm_topk_prob=False, hidden_dropout=0.0)  # fmt: skip
    return HfLmT5Config(**{**base, **kw})


def brute_force_moe(moe: SparseMoE, x: torch.Tensor) -> torch.Tensor:
    """The mixture, one token and one choice at a time: queues filled per sequence, every first
    choice before any second choice, tokens in order; an assignment past the capacity adds nothing."""
    B, T, C = x.shape
    probs = F.linear(x.float(), moe.gate.weight.float()).softmax(-1)
    out = torch.zeros_like(x)
    for b in range(B):
        load = [0] * moe.num_experts
        cap = moe.capacity(T)
        for j in range(moe.top_k):
            for t in range(T):
                top = probs[b, t].topk(moe.top_k)
                weight = top.values[j] / (top.values.sum() if moe.norm_topk_prob else 1.0)
                e = int(top.indices[j])
                if load[e] < cap:
                    out[b, t] += weight * moe.experts[e](x[b, t][None])[0]
                load[e] += 1
    return out


ROUTING_CASES = {
    "top2_no_capacity": dict(),
    "top2_swiglu": dict(hidden_act="swiglu", mlp_bias=False),
    "top2_capacity_factor": dict(capacity_factor=0.5),
    "switch_top1_capacity": dict(num_experts_per_tok=1, norm_topk_prob=False, expert_capacity=2),
    "top3_of_5": dict(num_local_experts=5, num_experts_per_tok=3, expert_capacity=3),
}


@pytest.mark.parametrize("case", sorted(ROUTING_CASES))
def test_routing_matches_a_per_token_loop(case):
    torch.manual_seed(0)
    moe = SparseMoE(gpt_config(**ROUTING_CASES[case])).eval()
    x = torch.randn(3, 9, 32)
    with torch.no_grad():
        out, logits = moe(x)
        want = brute_force_moe(moe, x)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)
    assert logits.shape == (27, moe.num_experts)


def test_capacity_drops_exactly_the_overflowing_tokens():
    """All tokens prefer expert 0; with capacity 2 only the first two of each sequence get it, the
    rest add nothing (so in a block they pass through the residual unchanged)."""
    torch.manual_seed(0)
    config = gpt_config(num_experts_per_tok=1, norm_topk_prob=False, expert_capacity=2)
    moe = SparseMoE(config).eval()
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.weight[0, 0] = 10.0
    x = torch.randn(2, 6, 32)
    x[..., 0] = 1.0  # every token scores expert 0 highest
    with torch.no_grad():
        out, _ = moe(x)
        p0 = F.linear(x, moe.gate.weight).softmax(-1)[..., 0:1]
        kept = moe.experts[0](x[:, :2]) * p0[:, :2]
    torch.testing.assert_close(out[:, :2], kept)
    assert torch.equal(out[:, 2:], torch.zeros_like(out[:, 2:]))
    # a capacity factor of 1 with 6 tokens, 4 experts, k = 1 is ceil(1.5) = 2 slots: the same drops
    moe.expert_capacity, moe.capacity_factor = None, 1.0
    assert moe.capacity(6) == 2
    with torch.no_grad():
        assert torch.equal(moe(x)[0], out)


def test_dropping_is_causal_in_a_decoder():
    """Queues fill in sequence order, so a later token never takes an earlier token's slot."""
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(gpt_config(num_experts_per_tok=1, expert_capacity=2)).eval()
    x = torch.randint(0, VOCAB, (2, 12))
    y = x.clone()
    y[:, 7:] = torch.randint(0, VOCAB, (2, 5))
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :7], b[:, :7], atol=1e-6, rtol=0)


def test_load_balancing_loss_by_hand_and_against_mixtral():
    torch.manual_seed(0)
    E, k = 4, 2
    layers = (torch.randn(6, E), torch.randn(6, E))
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    # by hand: f_i = share of real tokens (over both layers) with i in their top k, P_i = mean prob
    rows = [
        (logits.softmax(-1)[r], logits[r].topk(k).indices.tolist()) for logits in layers for r in range(6)
    ]
    real = [bool(v) for v in mask.reshape(-1).tolist()] * 2
    n = sum(real)
    f = [sum(i in top for (_, top), keep in zip(rows, real) if keep) / n for i in range(E)]
    P = [sum(float(p[i]) for (p, _), keep in zip(rows, real) if keep) / n for i in range(E)]
    want = E * sum(fi * Pi for fi, Pi in zip(f, P))
    got = load_balancing_loss(layers, E, k, mask)
    assert math.isclose(float(got), want, rel_tol=1e-6)
    torch.testing.assert_close(got, load_balancing_loss_func(layers, E, k, mask))
    torch.testing.assert_close(load_balancing_loss(layers, E, k), load_balancing_loss_func(layers, E, k))
    # uniform routing gives k; all tokens on the same k experts give E
    uniform = (torch.zeros(8, E),)
    assert math.isclose(float(load_balancing_loss(uniform, E, 1)), 1.0, rel_tol=1e-6)
    collapsed = (torch.tensor([[50.0, 0, 0, 0]]).repeat(8, 1),)
    assert math.isclose(float(load_balancing_loss(collapsed, E, 1)), E, rel_tol=1e-4)
    z = router_z_loss(layers, mask)
    lse = torch.cat(layers).logsumexp(-1) ** 2
    torch.testing.assert_close(z, lse[torch.tensor(real)].mean())


def test_loss_includes_the_weighted_router_losses():
    torch.manual_seed(0)
    config = gpt_config(router_aux_loss_coef=0.5, router_z_loss_coef=0.1)
    model = HfLmGPTForCausalLM(config).train()  # no dropout, no jitter: deterministic
    x = torch.randint(0, VOCAB, (2, 8))
    with torch.no_grad():
        out = model(x, labels=x, output_router_logits=True)
        dense_loss = F.cross_entropy(out.logits[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        evaluated = model.eval()(x, labels=x, output_router_logits=True)
    assert len(out.router_logits) == 2 and out.router_logits[0].shape == (16, 4)
    want = dense_loss + 0.5 * out.aux_loss + 0.1 * router_z_loss(out.router_logits)
    torch.testing.assert_close(out.loss, want)
    torch.testing.assert_close(out.aux_loss, load_balancing_loss(out.router_logits, 4, 2))
    # in eval mode the loss is the LM's alone (perplexity), the aux loss is still reported
    torch.testing.assert_close(evaluated.loss, dense_loss)
    torch.testing.assert_close(evaluated.aux_loss, out.aux_loss)
    plain = model(x)
    assert plain.router_logits is None and plain.aux_loss is None  # only on request, as in transformers
    assert model(x, labels=x).aux_loss is None


@pytest.mark.parametrize("head", ["gpt-lm", "gpt-cls", "t5-lm", "t5-cls", "t5-mask-predict"])
def test_every_head_adds_each_stacks_router_losses_in_training(head):
    # a training loss is the eval loss plus, for every sparse stack (T5's encoder and decoder), the
    # load-balancing loss times its coefficient and the z-loss times its own
    coefs = dict(router_aux_loss_coef=0.5, router_z_loss_coef=0.1)
    x = torch.randint(3, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(x)
    mask[1, 6:] = 0
    torch.manual_seed(0)
    if head.startswith("gpt"):
        config = gpt_config(**coefs, num_labels=3, pad_token_id=0)
        model = (HfLmGPTForCausalLM if head == "gpt-lm" else HfLmGPTForSequenceClassification)(config)
    else:
        config = t5_config(**coefs, num_labels=3, pad_token_id=0, eos_token_id=2, decoder_start_token_id=0)
        if head == "t5-mask-predict":
            config = t5_config(
                **coefs, decoder_attention="bidirectional", mask_token_id=1, decoder_start_token_id=0
            )
        classes = {"t5-lm": HfLmT5ForConditionalGeneration, "t5-cls": HfLmT5ForSequenceClassification}
        model = classes.get(head, HfLmT5ForMaskPredict)(config)
    labels = torch.tensor([0, 2]) if head.endswith("cls") else x
    if head.startswith("gpt"):
        decoder = {}
    elif head == "t5-cls":  # the decoder reads the text shifted right, under the source's padding
        decoder = {}
    else:  # a target padded apart from the source
        decoder = dict(decoder_input_ids=x, decoder_attention_mask=mask.flip(0))
    with torch.no_grad():
        trained = model.train()(x, attention_mask=mask, labels=labels, **decoder).loss
        evaluated = model.eval()(x, attention_mask=mask, labels=labels, **decoder).loss
        out = model.model(x, attention_mask=mask, output_router_logits=True, **decoder)
    if head.startswith("gpt"):
        stacks = [(out.router_logits, mask)]
    else:
        stacks = [
            (out.encoder_router_logits, mask),
            (
                out.decoder_router_logits,
                decoder.get("decoder_attention_mask", model.model._source_as_decoder_input(x, mask)[1]),
            ),
        ]
    assert all(len(logits) == 2 for logits, _ in stacks)
    E, k = config.num_local_experts, config.num_experts_per_tok
    want = sum(0.5 * load_balancing_loss(r, E, k, m) + 0.1 * router_z_loss(r, m) for r, m in stacks)
    torch.testing.assert_close(trained - evaluated, want)


def test_sparse_step_picks_switchs_layers():
    model = HfLmT5ForConditionalGeneration(
        t5_config(num_hidden_layers=4, encoder_sparse_step=2, decoder_sparse_step=1)
    )
    enc = [isinstance(b.mlp, SparseMoE) for b in model.model.encoder.layers]
    dec = [isinstance(b.mlp, SparseMoE) for b in model.model.decoder.layers]
    assert enc == [False, True, False, True] and dec == [True] * 4
    # a Mask-Predict decoder (bidirectional) is the decoder stack: it follows decoder_sparse_step too
    mask_predict = HfLmT5ForMaskPredict(
        t5_config(
            num_hidden_layers=4,
            encoder_sparse_step=1,
            decoder_sparse_step=2,
            decoder_attention="bidirectional",
            mask_token_id=3,
        )
    )
    dec = [isinstance(b.mlp, SparseMoE) for b in mask_predict.model.decoder.layers]
    assert dec == [False, True, False, True]


def test_dense_default_is_unchanged():
    """num_local_experts=0: the MoE fields change nothing (same keys, same outputs)."""
    torch.manual_seed(0)
    plain = HfLmGPTForCausalLM(gpt_config(num_local_experts=0)).eval()
    torch.manual_seed(0)
    other = HfLmGPTForCausalLM(
        gpt_config(num_local_experts=0, capacity_factor=1.0, decoder_sparse_step=2)
    ).eval()
    assert list(plain.state_dict()) == list(other.state_dict())
    assert not any("experts" in k or "gate." in k for k in plain.state_dict())
    x = torch.randint(0, VOCAB, (2, 8))
    out = plain(x, labels=x, output_router_logits=True)
    assert torch.equal(out.logits, other(x).logits)
    assert out.aux_loss is None and out.router_logits is None
    assert len(out.to_tuple()) == 3  # loss, logits, cache: the dense tuple of before


def mixtral_reference_config(**kw) -> MixtralConfig:
    """A small Mixtral whose training loss includes the load-balancing loss (`output_router_logits`)."""
    base = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
        max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    return MixtralConfig(**{**base, **kw})


def switch_reference_config(**kw) -> SwitchTransformersConfig:
    """A small SwitchTransformers whose expert capacity (3 slots) binds on 13-token sources."""
    base = dict(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=4, num_decoder_layers=4, num_heads=4,
        num_experts=4, expert_capacity=3, num_sparse_encoder_layers=2, num_sparse_decoder_layers=2,
        router_jitter_noise=0.01, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    return SwitchTransformersConfig(**{**base, **kw})


def test_mixtral_parity_and_generation():
    torch.manual_seed(0)
    ref = MixtralForCausalLM(mixtral_reference_config()).eval()
    ours = from_transformers(ref)
    assert type(ours) is HfLmGPTForCausalLM and ours.config.num_local_experts == 4
    x = torch.randint(3, VOCAB, (2, 11))
    mask = torch.ones_like(x)
    mask[1, :3] = 0
    with torch.no_grad():
        # train mode (no dropout, no jitter) so that Mixtral's loss also includes the aux loss
        a, b = ref.train()(x, labels=x), ours.train()(x, labels=x)
    ref.eval(), ours.eval()
    assert (a.logits - b.logits).abs().max() < 1e-5
    torch.testing.assert_close(b.aux_loss, a.aux_loss)
    torch.testing.assert_close(b.loss, a.loss)
    for rl_a, rl_b in zip(a.router_logits, b.router_logits):
        torch.testing.assert_close(rl_b, rl_a.float())
    ref.config.output_router_logits = False  # transformers' Mixtral fails computing it with a cache
    common = dict(attention_mask=mask, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(ref.generate(x, **common), ours.generate(x, **common))


def test_switch_transformers_parity_with_capacity():
    torch.manual_seed(0)
    ref = SwitchTransformersForConditionalGeneration(switch_reference_config()).eval()
    ours = from_transformers(ref)
    assert ours.config.expert_capacity == 3 and ours.config.router_jitter_noise == 0.01
    x, y = torch.randint(2, VOCAB, (2, 13)), torch.randint(2, VOCAB, (2, 9))
    with torch.no_grad():
        a = ref(input_ids=x, labels=y, output_router_logits=True)
        b = ours(input_ids=x, labels=y, output_router_logits=True)
    assert (a.logits - b.logits).abs().max() < 1e-5
    # the capacity really binds: 13 tokens on 4 experts of 3 slots drop some
    assert max(torch.bincount(rl.argmax(-1), minlength=4).max() for rl in b.encoder_router_logits) > 3
    for rl_a, rl_b in zip(a.encoder_router_logits, b.encoder_router_logits):
        torch.testing.assert_close(rl_b, rl_a.reshape(rl_b.shape))
    common = dict(max_new_tokens=6, do_sample=False)
    assert torch.equal(ref.generate(x, **common), ours.generate(x, **common))


@pytest.mark.parametrize("family", ["gpt", "t5", "bart"])
def test_generate_with_cache_equals_without(family):
    torch.manual_seed(0)
    if family == "gpt":
        model = HfLmGPTForCausalLM(gpt_config(noisy_gating=True, router_jitter_noise=0.1)).eval()
    elif family == "t5":
        model = HfLmT5ForConditionalGeneration(t5_config(decoder_sparse_step=2)).eval()
    else:
        config = HfLmBartConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                num_local_experts=3, num_experts_per_tok=2, hidden_dropout=0.0)  # fmt: skip
        model = HfLmBartForConditionalGeneration(config).eval()
    x = torch.randint(3, VOCAB, (2, 7))
    for kwargs in (dict(do_sample=False), dict(do_sample=False, num_beams=3)):
        common = dict(max_new_tokens=8, min_new_tokens=8, pad_token_id=0, **kwargs)
        assert torch.equal(model.generate(x, **common), model.generate(x, use_cache=False, **common))


def test_save_and_load_keep_the_capacity(tmp_path):
    """In process; the same models as remote code: tests/test_model_properties.py."""
    torch.manual_seed(0)
    gpt = HfLmGPTForCausalLM(
        gpt_config(capacity_factor=1.25, hidden_act="swiglu", mlp_bias=False, output_router_logits=True)
    ).eval()
    x = torch.randint(3, VOCAB, (2, 7))
    gpt.save_pretrained(tmp_path)
    again = HfLmGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert again.config.capacity_factor == 1.25 and again.config.num_local_experts == 4
    assert torch.equal(again(x).logits, gpt(x).logits)


def test_trainer_steps_lower_the_loss_with_the_aux_loss(tmp_path):
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(gpt_config(router_aux_loss_coef=0.01))
    x = torch.randint(0, 8, (16, 16))  # a small vocabulary: quick to learn
    data = [{"input_ids": row, "labels": row} for row in x]
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=30, learning_rate=3e-3,
        report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    batch = {"input_ids": x, "labels": x}
    model.eval()
    with torch.no_grad():
        before = model(**batch, output_router_logits=True)
    Trainer(model=model, args=args, train_dataset=data).train()
    model.train()  # no dropout here: the training-mode loss, with the aux loss
    with torch.no_grad():
        after = model(**batch, output_router_logits=True)
        lm_only = F.cross_entropy(after.logits[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))
    assert after.loss < before.loss - 0.5
    torch.testing.assert_close(after.loss, lm_only + 0.01 * after.aux_loss)  # the aux loss is in the loss


BAD_CONFIGS = [
    ("num_local_experts", dict(num_local_experts=-1)),
    ("num_local_experts", dict(num_local_experts=2.5)),
    ("num_experts_per_tok", dict(num_experts_per_tok=0)),
    ("num_experts_per_tok", dict(num_experts_per_tok=5)),
    ("expert_capacity", dict(expert_capacity=0)),
    ("capacity_factor", dict(capacity_factor=-1.0)),
    ("expert_capacity", dict(expert_capacity=4, capacity_factor=1.0)),
    ("router_jitter_noise", dict(router_jitter_noise=-0.1)),
    ("router_jitter_noise", dict(router_jitter_noise=float("inf"))),
    ("router_aux_loss_coef", dict(router_aux_loss_coef=float("nan"))),
    ("router_z_loss_coef", dict(router_z_loss_coef=-0.1)),
    ("decoder_sparse_step", dict(decoder_sparse_step=0)),
    ("norm_topk_prob", dict(norm_topk_prob="yes")),
    ("output_router_logits", dict(output_router_logits=1)),
]


@pytest.mark.parametrize(
    "field,kwargs", BAD_CONFIGS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_CONFIGS)]
)
def test_bad_config_values_name_the_field(field, kwargs):
    with pytest.raises(ValueError, match=field):
        gpt_config(**kwargs)


def test_bert_refuses_experts():
    with pytest.raises(ValueError, match="num_local_experts"):
        HfLmBertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_local_experts=4
        )


def test_moe_decoding_step_compiles_to_one_graph():
    """The routed feed-forward traces whole (fullgraph) in a static-cache decoding step, as generate()
    compiles it on a GPU, and is not recompiled as the cache fills."""
    from test_static_cache import compiled_decode, left_padded_prompts
    from transformers import StaticCache

    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(gpt_config(capacity_factor=2.0)).eval()
    x, mask = left_padded_prompts()
    x = torch.cat([x, torch.randint(3, 97, (2, 3))], 1)  # 6 prompt tokens, then 3 steps
    mask = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        cache = StaticCache(config=model.config, max_cache_len=12)
        model(x[:, :6], attention_mask=mask[:, :6], past_key_values=cache)
        step = torch.compile(model.forward, fullgraph=True, backend="eager")
        wide = F.pad(mask, (0, 12 - mask.shape[1]))
        eager_cache = StaticCache(config=model.config, max_cache_len=12)
        model(x[:, :6], attention_mask=mask[:, :6], past_key_values=eager_cache)

        def run(t):
            t += 6
            m = wide.clone()
            m[:, t + 1 :] = 0  # the slots not filled yet
            args = dict(attention_mask=m, position_ids=positions[:, t : t + 1])
            want = model(x[:, t : t + 1], past_key_values=eager_cache, **args).logits
            return step(x[:, t : t + 1], past_key_values=cache, **args).logits, want

        for got, want in compiled_decode(run, 3):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    "noise", [dict(noisy_gating=True), dict(router_jitter_noise=0.5)], ids=["noisy", "jitter"]
)
def test_router_noise_only_in_training(noise):
    """Shazeer's noisy gating and Switch's jitter perturb the routing in training, never in eval."""
    torch.manual_seed(0)
    moe = SparseMoE(gpt_config(**noise))
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        moe.train()
        a, b = moe(x)[1], moe(x)[1]
        moe.eval()
        c, d = moe(x)[1], moe(x)[1]
    assert not torch.equal(a, b) and torch.equal(c, d)
    torch.testing.assert_close(c, F.linear(x, moe.gate.weight).reshape(32, -1))
