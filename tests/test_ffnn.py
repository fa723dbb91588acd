"""hflm_ffnn (Bengio et al., 2003): parity with a per-position loop, locality, the variants, losses,
saving and the remote-code round trip, generate() and padding, errors, and learning."""

import itertools
import json

import pytest
import torch
import torch.nn.functional as F
from remote_code import shipped_files
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from hf_lm import HfLmFFNNConfig, HfLmFFNNForCausalLM, HfLmFFNNModel

V = 13
VARIANTS = {
    "plain": dict(),
    "direct": dict(direct_connections=True),
    "tied": dict(tie_word_embeddings=True),
    "tied_direct": dict(tie_word_embeddings=True, direct_connections=True),
}


def tiny_config(**overrides) -> HfLmFFNNConfig:
    kwargs = dict(
        vocab_size=V,
        context_size=3,
        hidden_size=8,
        intermediate_size=16,
        direct_connections=False,
        initializer_range=0.3,  # large enough that every term visibly moves the logits
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    kwargs.update(overrides)
    return HfLmFFNNConfig(**kwargs)


@pytest.fixture(params=sorted(VARIANTS))
def model(request):
    return HfLmFFNNForCausalLM(tiny_config(**VARIANTS[request.param])).eval()


def ids(b=2, t=9):
    return torch.randint(3, V, (b, t))


def naive_logits(model, x):
    """The paper's equation at every position, one position at a time, without unfold."""
    cfg, inner = model.config, model.model
    B, T = x.shape
    out = torch.empty(B, T, cfg.vocab_size)
    for b in range(B):
        for t in range(T):
            parts = []
            for j in range(t - cfg.context_size + 1, t + 1):  # oldest first
                parts.append(inner.embed_tokens.weight[x[b, j]] if j >= 0 else inner.start_embedding)
            window = torch.cat(parts)  # (n * m,)
            hidden = torch.tanh(inner.hidden.bias + inner.hidden.weight @ window)  # tanh(d + H x)
            if cfg.tie_word_embeddings:
                logits = inner.embed_tokens.weight @ (model.output_projection.weight @ hidden)  # C (P h)
            else:
                logits = model.lm_head.weight @ hidden  # U h
            logits = logits + model.lm_head.bias  # b
            if cfg.direct_connections:
                logits = logits + model.direct.weight @ window  # W x
            out[b, t] = logits
    return out


# ---------------------------------------------------------------- the function it computes


def test_forward_equals_a_per_position_loop(model):
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, naive_logits(model, x), rtol=1e-5, atol=1e-5)


def test_only_the_window_matters(model):
    """Changing token j changes positions j .. j + n - 1 and nothing else (n = context_size)."""
    n, j = model.config.context_size, 3
    x = ids(t=10)
    y = x.clone()
    y[:, j] = (y[:, j] - 2) % (V - 3) + 3  # another real token
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :j], b[:, :j], rtol=0, atol=0)
    torch.testing.assert_close(a[:, j + n :], b[:, j + n :], rtol=0, atol=0)
    for t in range(j, j + n):
        assert not torch.allclose(a[:, t], b[:, t]), t


def test_tied_and_untied_heads():
    untied = HfLmFFNNForCausalLM(tiny_config())
    tied = HfLmFFNNForCausalLM(tiny_config(tie_word_embeddings=True))
    assert untied.lm_head.weight.shape == (V, 16)  # U: (V, h)
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    assert tied.lm_head.weight is tied.model.embed_tokens.weight  # C, (V, m)
    assert tied.output_projection.weight.shape == (8, 16)  # P: h -> m
    names = {n for n, _ in tied.named_parameters()}
    assert "output_projection.weight" in names and "lm_head.bias" in names


def test_direct_connections_off_equals_on_with_w_zero():
    on = HfLmFFNNForCausalLM(tiny_config(direct_connections=True)).eval()
    off = HfLmFFNNForCausalLM(tiny_config(direct_connections=False)).eval()
    missing, unexpected = off.load_state_dict(on.state_dict(), strict=False)
    assert missing == [] and unexpected == ["direct.weight"]
    x = ids()
    with torch.no_grad():
        assert not torch.allclose(on(x).logits, off(x).logits)
        torch.nn.init.zeros_(on.direct.weight)
        torch.testing.assert_close(on(x).logits, off(x).logits, rtol=0, atol=0)


def test_base_model_returns_the_tanh_layer(model):
    x = ids()
    base = HfLmFFNNModel(model.config).eval()
    base.load_state_dict(model.model.state_dict())
    with torch.no_grad():
        out = base(x, output_hidden_states=True)
        window, hidden = out.hidden_states
    assert out.last_hidden_state.shape == (2, 9, 16) and window.shape == (2, 9, 3 * 8)
    torch.testing.assert_close(out.last_hidden_state, torch.tanh(base.hidden(window)), rtol=0, atol=0)
    assert out.last_hidden_state.abs().max() < 1


def test_inputs_embeds_equal_input_ids(model):
    x = ids()
    with torch.no_grad():
        a = model(x).logits
        b = model(inputs_embeds=model.model.embed_tokens(x)).logits
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------- padding


def test_left_padding_does_not_leak(model):
    x = ids(b=1, t=6)
    padded = torch.cat((torch.full((1, 4), 5), x), dim=1)  # padding made of a real token id
    mask = torch.tensor([[0] * 4 + [1] * 6])
    with torch.no_grad():
        torch.testing.assert_close(
            model(padded, attention_mask=mask).logits[:, 4:], model(x).logits, rtol=0, atol=1e-6
        )


def test_left_padded_batch_generates_like_each_prompt_alone(model):
    prompts = [torch.tensor([4, 9]), torch.tensor([7, 3, 11, 5, 6]), torch.tensor([8])]
    width = max(len(p) for p in prompts)
    batch = torch.stack([torch.cat((torch.zeros(width - len(p), dtype=torch.long), p)) for p in prompts])
    mask = torch.stack([torch.cat((torch.zeros(width - len(p)), torch.ones(len(p)))).long() for p in prompts])
    out = model.generate(batch, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    for row, p in zip(out, prompts):
        alone = model.generate(p[None], max_new_tokens=6, min_new_tokens=6, do_sample=False)
        assert torch.equal(row[width:], alone[0, len(p) :])


# ---------------------------------------------------------------- losses and training


def test_loss_and_backward(model):
    x = ids()
    labels = x.clone()
    labels[0, 4] = -100
    model.train()
    out = model(x, labels=labels)
    expected = F.cross_entropy(
        out.logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_learns_a_deterministic_sequence():
    """0 1 2 0 1 3 repeated: after "0 1" comes 2 or 3, so only a window of 3 tokens predicts it."""
    torch.manual_seed(0)
    model = HfLmFFNNForCausalLM(
        HfLmFFNNConfig(vocab_size=5, context_size=3, hidden_size=8, intermediate_size=32)
    )
    stream = torch.tensor([0, 1, 2, 0, 1, 3] * 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(100):
        x = torch.stack([stream[s : s + 12] for s in torch.randint(0, 6, (16,)).tolist()])  # random phases
        labels = x.clone()
        labels[:, :3] = -100  # targets whose window reaches before the row start are ambiguous
        loss = model(x, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.01
    out = model.eval().generate(torch.tensor([[1, 3, 0]]), max_new_tokens=12, do_sample=False)
    assert out[0].tolist() == [1, 3, 0] + [1, 2, 0, 1, 3, 0] * 2


# ---------------------------------------------------------------- generate()


def test_greedy_generate_is_the_argmax_chain_and_uses_only_the_window(model):
    prompt = ids(t=4)
    out = model.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    seq = prompt
    with torch.no_grad():
        for _ in range(6):
            logits = model(seq).logits[:, -1]
            logits[:, model.config.eos_token_id] = -float("inf")  # min_new_tokens bans EOS
            seq = torch.cat((seq, logits.argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, seq)
    calls = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: calls.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    model.generate(ids(t=20), max_new_tokens=4, min_new_tokens=4, do_sample=False)
    hook.remove()
    assert calls == [model.config.context_size] * 4  # O(1) per step: the window, never the whole sequence


def test_beam_search_finds_the_most_likely_continuation():
    model = HfLmFFNNForCausalLM(tiny_config(vocab_size=6, eos_token_id=None, bos_token_id=None)).eval()
    prompt = torch.tensor([[3, 4]])
    steps = 2
    out = model.generate(prompt, max_new_tokens=steps, num_beams=6**steps, do_sample=False)

    def score(cont):
        seq = torch.cat((prompt, torch.tensor([cont])), dim=1)
        lp = model(seq).logits[0].log_softmax(-1)
        return sum(lp[t, seq[0, t + 1]].item() for t in range(1, seq.shape[1] - 1))

    best = max(itertools.product(range(6), repeat=steps), key=score)
    assert out[0, 2:].tolist() == list(best)


def test_sampling_is_seeded_and_top_k_1_is_greedy(model):
    prompt = ids(t=3)
    torch.manual_seed(3)
    a = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=True)
    torch.manual_seed(3)
    b = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=True)
    assert torch.equal(a, b)
    greedy = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    top1 = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=True, top_k=1)
    assert torch.equal(top1, greedy)


# ---------------------------------------------------------------- saving and loading


SHIPPED_FFNN_FILES = {
    "hflm_common.py",
    "hflm_inputs.py",
    "hflm_losses.py",
    "hflm_pretrained.py",
    "hflm_configuration_ffnn.py",
    "hflm_modeling_ffnn.py",
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_save_and_load_round_trip(tmp_path, variant):
    model = HfLmFFNNForCausalLM(tiny_config(**VARIANTS[variant])).eval()
    model.save_pretrained(tmp_path)
    loaded, info = HfLmFFNNForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    x = ids()
    torch.testing.assert_close(loaded.eval()(x).logits, model(x).logits, rtol=0, atol=0)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert ("lm_head.weight" in keys) != model.config.tie_word_embeddings  # a tied head is stored once
    assert ("direct.weight" in keys) == model.config.direct_connections
    assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path), HfLmFFNNForCausalLM)
    assert isinstance(AutoModel.from_pretrained(tmp_path), HfLmFFNNModel)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "hflm_ffnn"
    # the code it ships (loading it as remote code: tests/test_model_properties.py)
    assert shipped_files(tmp_path) == SHIPPED_FFNN_FILES
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == {
        "AutoConfig": "hflm_configuration_ffnn.HfLmFFNNConfig",
        "AutoModel": "hflm_modeling_ffnn.HfLmFFNNModel",
        "AutoModelForCausalLM": "hflm_modeling_ffnn.HfLmFFNNForCausalLM",
    }


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(context_size=0), "context_size"),
        (dict(hidden_size=0), "hidden_size"),
        (dict(intermediate_size=-1), "intermediate_size"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(direct_connections="yes"), "direct_connections"),
        (dict(tie_word_embeddings=1), "tie_word_embeddings"),
        (dict(hidden_dropout=1.0), "hidden_dropout"),
        (dict(initializer_range=-0.1), "initializer_range"),
        (dict(use_cache=True), "use_cache"),
        (dict(eos_token_id=V), "eos_token_id"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**kwargs)


def test_bad_inputs_give_clear_errors():
    model = HfLmFFNNForCausalLM(tiny_config())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[1, V]]))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 3))
    with pytest.raises(ValueError, match="inputs_embeds"):
        model(inputs_embeds=torch.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="exactly one"):
        model()
    with pytest.raises(ValueError, match="labels"):
        model(torch.tensor([[1, 2]]), labels=torch.tensor([[1]]))
    with pytest.raises(ValueError, match="input_ids"):
        model.generate(inputs_embeds=torch.zeros(1, 2, 8), max_new_tokens=2)


@pytest.mark.parametrize("direct", [True, False])
def test_resize_token_embeddings_resizes_the_direct_connections(direct):
    """W has one row per token like the head: a resize that missed it broke the forward."""
    model = HfLmFFNNForCausalLM(tiny_config(direct_connections=direct)).eval()
    x = ids()
    with torch.no_grad():
        before = model(x).logits
        model.resize_token_embeddings(V + 5, mean_resizing=False)
        after = model(x).logits
    assert after.shape == (*x.shape, V + 5) and model.config.vocab_size == V + 5
    torch.testing.assert_close(after[..., :V], before)  # old tokens score as before
    if direct:
        assert model.direct.weight.shape == (V + 5, model.direct.in_features)
        assert not model.direct.weight[V:].any()  # new tokens: no direct evidence yet
    model.resize_token_embeddings(V - 4)
    assert model(x.clamp(max=V - 5)).logits.shape == (*x.shape, V - 4)
