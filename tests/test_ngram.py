"""hflm_ngram: exact streaming counts, smoothing against textbook formulas computed here in plain
Python, normalization, padding, save/load, the remote-code round trip, generate() and errors."""

import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest
import torch
from remote_code import shipped_files
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM

from hf_lm import HfLmNGramConfig, HfLmNGramForCausalLM, NGramCounter

SMOOTHINGS = ["add_k", "interpolated_kn", "modified_kn"]

# A toy corpus over V = 8 tokens (token 4 never occurs) whose count-of-counts n1..n4 are all
# non-zero at every level of a trigram model, so every modified-KN discount is the textbook estimate.
TOY = [
    "33331105711205733333",
    "33333333333336333331212057120",
    "05711271733105573333335333333333333333",
    "712121112053331112773357112712057120",
    "3332057335777111127124",
    "7120571112056333333333333333333333712053",
]
TOY_SEQS = [[int(c) for c in s] for s in TOY]
TOY_V = 8


def fit(seqs, **kwargs):
    kwargs.setdefault("vocab_size", TOY_V)
    return HfLmNGramForCausalLM.fit(seqs, HfLmNGramConfig(**kwargs)).eval()


# ---------------------------------------------------------------- the textbook, in plain Python


def textbook_model(seqs, V, order, smoothing, k=1.0, discounts=None):
    """p(w | context) from the formulas of Chen & Goodman (1998), with dictionaries only.

    Level n uses raw counts for n = order (and for every n with add-k) and continuation counts
    N1+(. g) = |{v : c(v g) > 0}| below; a context of j tokens is scored at level j + 1.
    """
    raw = {
        n: Counter(tuple(s[i : i + n]) for s in seqs for i in range(len(s) - n + 1))
        for n in range(1, order + 1)
    }
    used = {order: raw[order]}
    for n in range(1, order):
        cont = Counter()
        for gram in raw[n + 1]:  # distinct (n+1)-grams
            cont[gram[1:]] += 1
        used[n] = raw[n] if smoothing == "add_k" else cont

    estimated = {}
    for n in range(1, order + 1):
        n1, n2, n3, n4 = (sum(1 for c in used[n].values() if c == j) for j in (1, 2, 3, 4))
        y = n1 / (n1 + 2 * n2) if n1 else None
        if smoothing == "interpolated_kn":
            estimated[n] = (y, y, y)
        elif smoothing == "modified_kn":
            estimated[n] = (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)
    if discounts is not None:
        estimated = {
            n: tuple(d) if isinstance(d, (list, tuple)) else (d, d, d) for n, d in enumerate(discounts, 1)
        }

    def followers(n, h):
        return {g[-1]: c for g, c in used[n].items() if g[:-1] == h and c > 0}

    def p(n, h, w):
        f = followers(n, h)
        total = sum(f.values())
        if smoothing == "add_k":
            return (f.get(w, 0) + k) / (total + k * V)
        lower = 1.0 / V if n == 1 else p(n - 1, h[1:], w)
        if total == 0:
            return lower
        d1, d2, d3 = estimated[n]

        def D(c):
            return 0.0 if c == 0 else d1 if c == 1 else d2 if c == 2 else d3

        gamma = sum(D(c) for c in f.values()) / total
        return max(f.get(w, 0) - D(f.get(w, 0)), 0) / total + gamma * lower

    def prob(context, w):
        context = tuple(context)[-(order - 1) :] if order > 1 else ()
        return p(len(context) + 1, context, w)

    return prob, estimated


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_matches_the_textbook_formulas_on_a_toy_corpus(smoothing):
    order = 3
    model = fit(TOY_SEQS, order=order, smoothing=smoothing, add_k=0.5)
    prob, estimated = textbook_model(TOY_SEQS, TOY_V, order, smoothing, k=0.5)
    if smoothing != "add_k":
        for n, ds in estimated.items():  # the corpus was chosen so no estimate needs a fallback
            assert all(0 < d <= j for j, d in enumerate(ds, 1)), (n, ds)
        assert model.discounts() == [pytest.approx(list(estimated[n])) for n in (1, 2, 3)]
    # every position of these rows: seen, unseen (4) and row-start contexts
    rows = torch.tensor([[3, 3, 1, 2, 0, 5, 7], [4, 1, 2, 4, 4, 3, 6]])
    with torch.no_grad():
        probs = model(rows).logits.exp()  # (B, T, V)
    expected = torch.tensor(
        [
            [[prob(row[: t + 1], w) for w in range(TOY_V)] for t in range(rows.shape[1])]
            for row in rows.tolist()
        ]
    )
    torch.testing.assert_close(probs, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("smoothing", ["interpolated_kn", "modified_kn"])
def test_explicit_discounts_are_used(smoothing):
    discounts = (
        [0.6, 0.7, 0.8]
        if smoothing == "interpolated_kn"
        else [[0.3, 1.1, 1.9], [0.5, 0.9, 2.5], [0.7, 1.2, 1.3]]
    )
    model = fit(TOY_SEQS, order=3, smoothing=smoothing, discounts=discounts)
    prob, _ = textbook_model(TOY_SEQS, TOY_V, 3, smoothing, discounts=discounts)
    x = torch.tensor([[7, 1, 2, 0, 5, 3, 3, 4]])
    probs = model(x).logits.exp()[0]
    expected = torch.tensor(
        [[prob(x[0, : t + 1].tolist(), w) for w in range(TOY_V)] for t in range(x.shape[1])]
    )
    torch.testing.assert_close(probs, expected, rtol=1e-5, atol=1e-7)


def test_discount_estimates_and_continuation_counts_by_hand():
    """Counts, continuation counts and the discount formulas on a corpus small enough to read."""
    seqs = [[0, 1, 0, 1, 2], [1, 0, 1]]
    model = fit(seqs, vocab_size=3, order=2, smoothing="modified_kn")
    assert model.ngram_counts(1) == {(0,): 3, (1,): 4, (2,): 1}
    assert model.ngram_counts(2) == {(0, 1): 3, (1, 0): 2, (1, 2): 1}
    # distinct predecessors: 0 <- {1}, 1 <- {0}, 2 <- {1}
    assert model.ngram_counts(1, continuation=True) == {(0,): 1, (1,): 1, (2,): 1}
    # bigram count-of-counts n1=1 (1 2), n2=1 (1 0), n3=1 (0 1), n4=0: Y = 1/3
    y = 1 / 3
    d_bigram = [1 - 2 * y * 1 / 1, 2 - 3 * y * 1 / 1, 3 - 4 * y * 0 / 1]
    assert model.discounts()[1] == pytest.approx(d_bigram)
    # unigram continuation counts are all 1: n2 = 0, so D2 and D3+ fall back to KenLM's 1.0 and 1.5
    assert model.discounts()[0] == pytest.approx([1.0, 1.0, 1.5])
    p = model(torch.tensor([[1]])).logits.exp()[0, 0]
    # p(w | 1) = max(c - D, 0) / 3 + gamma * p_uni(w); gamma = (D1 + D2) / 3; p_uni: all D1=1 -> uniform
    gamma = (d_bigram[0] + d_bigram[1]) / 3
    expected = torch.tensor([(2 - d_bigram[1]) / 3, 0.0, (1 - d_bigram[0]) / 3]) + gamma / 3
    torch.testing.assert_close(p, expected.float())


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_distributions_sum_to_one_for_every_context(smoothing, order):
    V = 4
    gen = torch.Generator().manual_seed(order)
    seqs = [torch.randint(0, 3, (int(n),), generator=gen) for n in torch.randint(1, 30, (8,), generator=gen)]
    model = fit(seqs, vocab_size=V, order=order, smoothing=smoothing)  # token 3 is never seen
    contexts = torch.tensor(list(itertools.product(range(V), repeat=max(order - 1, 1))))  # every context
    with torch.no_grad():
        probs = model(contexts).logits.exp()  # (V^(n-1), n-1, V): full and row-start contexts
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:2]), rtol=0, atol=1e-5)
    assert (probs > 0).all()  # no token, seen or not, has probability 0


# ---------------------------------------------------------------- counting


def test_counts_are_exact_and_chunking_changes_nothing():
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 6, (int(n),), generator=gen) for n in (0, 1, 2, 5, 40, 13, 3)]
    mixed = [s.tolist() if i % 3 == 0 else s.numpy() if i % 3 == 1 else s for i, s in enumerate(seqs)]
    one = NGramCounter(4, 6, chunk_tokens=10_000).update(mixed).tables()
    for chunk in (1, 2, 3, 7):
        many = NGramCounter(4, 6, chunk_tokens=chunk).update(iter(mixed)).tables()
        for a, b in zip(one[0] + one[1], many[0] + many[1]):
            assert torch.equal(a, b), chunk
    model = HfLmNGramForCausalLM.fit(seqs, HfLmNGramConfig(vocab_size=6, order=4), chunk_tokens=3)
    for n in range(1, 5):
        expected = Counter(tuple(s[i : i + n].tolist()) for s in seqs for i in range(len(s) - n + 1))
        assert model.ngram_counts(n) == dict(expected)
    assert model.config.num_ngrams == [len(model.ngram_counts(n)) for n in range(1, 5)]


def test_model_has_no_trainable_parameters():
    model = fit(TOY_SEQS, order=2)
    assert list(model.parameters()) == [] and model.num_parameters() == 0
    assert {name for name, _ in model.named_buffers()} == {
        f"ngram_{kind}_{n}" for kind in ("keys", "counts") for n in (1, 2)
    }


# ---------------------------------------------------------------- forward: padding, loss, kwargs


def test_padding_breaks_the_context_and_left_padding_changes_nothing():
    model = fit(TOY_SEQS, order=3)
    x = torch.tensor([[3, 1, 2, 0, 5]])
    padded = torch.tensor([[7, 7, 3, 1, 2, 0, 5]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(
            model(padded, attention_mask=mask).logits[:, 2:], model(x).logits, rtol=0, atol=0
        )
        # without the mask the pad tokens would be context
        assert not torch.allclose(model(padded).logits[:, 2], model(x).logits[:, 0])


def test_a_context_beyond_the_order_does_not_matter():
    model = fit(TOY_SEQS, order=3)
    a = torch.tensor([[1, 5, 7, 1, 2]])
    b = torch.tensor([[3, 0, 7, 1, 2]])
    with torch.no_grad():
        torch.testing.assert_close(model(a).logits[:, 3:], model(b).logits[:, 3:], rtol=0, atol=0)


def test_loss_is_the_mean_negative_log_likelihood_and_honours_num_items_in_batch():
    model = fit(TOY_SEQS, order=2)
    x = torch.tensor([[3, 1, 2, 0, 5], [7, 1, 2, 4, 3]])
    labels = x.clone()
    labels[1, 3] = -100
    out = model(x, labels=labels)
    lp = out.logits
    terms = [-lp[b, t - 1, x[b, t]] for b in range(2) for t in range(1, 5) if labels[b, t] != -100]
    torch.testing.assert_close(out.loss, torch.stack(terms).mean())
    summed = model(x, labels=labels, num_items_in_batch=torch.tensor(20)).loss
    torch.testing.assert_close(summed, torch.stack(terms).sum() / 20)
    last = model(x, logits_to_keep=1).logits
    torch.testing.assert_close(last, lp[:, -1:], rtol=0, atol=0)


def test_bigram_beats_unigram_on_held_out_markov_text():
    gen = torch.Generator().manual_seed(0)
    V = 12
    transitions = torch.zeros(V, V)
    for v in range(V):  # each token has 3 likely successors
        transitions[v, torch.randperm(V, generator=gen)[:3]] = torch.tensor([0.6, 0.3, 0.1])

    def sample(n):
        s = [0]
        for _ in range(n - 1):
            s.append(int(torch.multinomial(transitions[s[-1]], 1, generator=gen)))
        return s

    train, held_out = sample(6000), sample(1500)
    x = torch.tensor([held_out])
    ppl = {}
    for order in (1, 2):
        model = HfLmNGramForCausalLM.fit(
            [train], HfLmNGramConfig(vocab_size=V, order=order, smoothing="modified_kn")
        )
        ppl[order] = math.exp(model(x, labels=x).loss.item())
    true_nll = -np.mean([math.log(transitions[a, b]) for a, b in zip(held_out, held_out[1:])])
    assert ppl[2] < ppl[1] / 2, ppl
    assert ppl[2] < 1.05 * math.exp(true_nll), (ppl, math.exp(true_nll))  # close to the source's own


# ---------------------------------------------------------------- generate()


def test_greedy_generate_is_the_argmax_chain():
    model = fit(TOY_SEQS, order=3)
    prompt = torch.tensor([[3, 3, 1], [5, 7, 1]])
    out = model.generate(prompt, max_new_tokens=6, do_sample=False)
    seq = prompt
    for _ in range(6):
        seq = torch.cat((seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, seq)
    # only the last order - 1 tokens matter: a longer prompt with the same ending continues the same way
    longer = torch.cat((torch.tensor([[0, 5], [2, 2]]), prompt), dim=1)
    assert torch.equal(model.generate(longer, max_new_tokens=6, do_sample=False)[:, 2:], out)


def test_beam_search_finds_the_most_likely_continuation():
    model = fit(TOY_SEQS, order=2)
    prompt = torch.tensor([[2]])
    steps, V = 2, TOY_V
    out = model.generate(
        prompt, max_new_tokens=steps, num_beams=V**steps, do_sample=False, early_stopping=True
    )

    def score(cont):
        seq = torch.cat((prompt, torch.tensor([cont])), dim=1)
        lp = model(seq).logits[0]
        return sum(lp[t, seq[0, t + 1]].item() for t in range(seq.shape[1] - 1))

    best = max(itertools.product(range(V), repeat=steps), key=score)
    assert out[0, 1:].tolist() == list(best)


def test_sampling_is_seeded_and_follows_the_distribution():
    model = fit(TOY_SEQS, order=2)
    prompt = torch.tensor([[3]])
    torch.manual_seed(1)
    a = model.generate(prompt, max_new_tokens=20, do_sample=True)
    torch.manual_seed(1)
    b = model.generate(prompt, max_new_tokens=20, do_sample=True)
    assert torch.equal(a, b)
    greedy = model.generate(prompt, max_new_tokens=20, do_sample=False)
    assert torch.equal(model.generate(prompt, max_new_tokens=20, do_sample=True, top_k=1), greedy)
    # 2000 one-step samples from "3" follow p(. | 3)
    torch.manual_seed(0)
    many = model.generate(prompt.repeat(2000, 1), max_new_tokens=1, do_sample=True)[:, 1]
    freq = torch.bincount(many, minlength=TOY_V).float() / 2000
    torch.testing.assert_close(freq, model(prompt).logits.exp()[0, 0], rtol=0, atol=0.04)


# ---------------------------------------------------------------- saving and loading


SHIPPED_NGRAM_FILES = {
    "hflm_common.py",
    "hflm_inputs.py",
    "hflm_losses.py",
    "hflm_pretrained.py",
    "hflm_configuration_ngram.py",
    "hflm_modeling_ngram.py",
}


def test_save_and_load_round_trip(tmp_path):
    model = fit(TOY_SEQS, order=4, smoothing="interpolated_kn")
    model.save_pretrained(tmp_path)
    loaded, info = HfLmNGramForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    assert loaded.config.num_ngrams == model.config.num_ngrams
    for (name, a), (_, b) in zip(sorted(model.named_buffers()), sorted(loaded.named_buffers())):
        assert torch.equal(a, b), name
    x = torch.tensor([[3, 1, 2, 0, 5, 4]])
    torch.testing.assert_close(loaded(x).logits, model(x).logits, rtol=0, atol=0)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert set(f.keys()) == {f"ngram_{kind}_{n}" for kind in ("keys", "counts") for n in range(1, 5)}
    auto = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(auto, HfLmNGramForCausalLM)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "hflm_ngram"
    # the code it ships (loading it as remote code: tests/test_model_properties.py)
    assert shipped_files(tmp_path) == SHIPPED_NGRAM_FILES
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == {
        "AutoConfig": "hflm_configuration_ngram.HfLmNGramConfig",
        "AutoModelForCausalLM": "hflm_modeling_ngram.HfLmNGramForCausalLM",
    }


def test_unfitted_checkpoint_loads_but_refuses_to_score(tmp_path):
    HfLmNGramForCausalLM(HfLmNGramConfig(vocab_size=5, order=2)).save_pretrained(tmp_path)
    loaded = HfLmNGramForCausalLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="never fitted"):
        loaded(torch.tensor([[1, 2]]))


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(order=0), "order"),
        (dict(order=6), "order"),
        (dict(smoothing="kneser_ney"), "smoothing"),
        (dict(smoothing="add_k", add_k=0), "add_k"),
        (dict(smoothing="add_k", discounts=[0.5, 0.5, 0.5]), "discounts"),
        (dict(smoothing="interpolated_kn", discounts=[0.5]), "discounts"),
        (dict(smoothing="modified_kn", discounts=[[0.5, 1.0, 3.5]] * 3), "discounts"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(pad_token_id=8), "pad_token_id"),
        (dict(num_ngrams=[3]), "num_ngrams"),
        (dict(use_cache=True), "use_cache"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    kwargs.setdefault("vocab_size", 8)
    with pytest.raises(ValueError, match=field):
        HfLmNGramConfig(**kwargs)


def test_bad_inputs_give_clear_errors():
    config = HfLmNGramConfig(vocab_size=5, order=2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        HfLmNGramForCausalLM.fit([[1, 2, 5]], config)
    with pytest.raises(ValueError, match="1-D"):
        HfLmNGramForCausalLM.fit([[[1, 2]]], config)
    with pytest.raises(ValueError, match="empty"):
        HfLmNGramForCausalLM.fit([[], []], config)
    model = HfLmNGramForCausalLM.fit([[1, 2, 3]], config)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[1, 5]]))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 3))
    with pytest.raises(ValueError, match="labels"):
        model(torch.tensor([[1, 2]]), labels=torch.tensor([[1, 7]]))
    with pytest.raises(ValueError, match="never fitted"):
        HfLmNGramForCausalLM(config)(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="input_ids"):
        model.generate(inputs_embeds=torch.zeros(1, 2, 4), max_new_tokens=2)
