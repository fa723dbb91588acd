"""BERT as a Markov random field (Wang & Cho, 2019): `hf_lm.generation_mlm.gibbs_sample`.

The sampler is checked on a "model" whose conditionals are those of a known pairwise MRF, so the
distribution Gibbs sampling must reach is known exactly, then end to end on a tiny BERT."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import BertTokenizer

from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM
from hf_lm.generation_mlm import gibbs_sample, mrf_prompt

PAD, MASK, CLS, SEP = 0, 1, 2, 3
V = 7  # ids 4, 5, 6 are the values a position can take


class PairwiseMRF(nn.Module):
    """p(x1, x2) ∝ exp(a[x1] + b[x2] + W[x1, x2]) over the sequence [CLS] x1 x2 [SEP].

    Its forward returns each position's exact conditional logits given the other position: what a
    perfect masked LM of that distribution returns (Wang & Cho's reading of BERT)."""

    def __init__(self, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.a, self.b = torch.randn(V, generator=gen), torch.randn(V, generator=gen)
        self.a[:4] = self.b[:4] = -torch.inf  # a position never holds a special token
        self.W = 1.5 * torch.randn(V, V, generator=gen)
        self.config = SimpleNamespace(pad_token_id=PAD)
        self.anchor = nn.Parameter(torch.zeros(()))  # the device the sampler reads

    def forward(self, input_ids, attention_mask=None):
        B = input_ids.shape[0]
        logits = torch.zeros(B, 4, V)
        logits[:, 1] = self.a + self.W[:, input_ids[:, 2]].T  # p(x1 | x2)
        logits[:, 2] = self.b + self.W[input_ids[:, 1], :]  # p(x2 | x1)
        return SimpleNamespace(logits=logits)

    def joint(self, temperature: float = 1.0) -> torch.Tensor:
        """(V, V) the exact distribution over the allowed values (the special ids get 0)."""
        energy = (self.a[:, None] + self.b[None, :] + self.W) / temperature
        return energy.flatten().softmax(0).view(V, V)


def _chains(batch: int) -> torch.Tensor:
    return torch.tensor([[CLS, MASK, MASK, SEP]]).repeat(batch, 1)


def _empirical(samples: torch.Tensor) -> torch.Tensor:
    counts = torch.zeros(V * V)
    counts.index_add_(0, samples[:, 1] * V + samples[:, 2], torch.ones(len(samples)))
    return (counts / len(samples)).view(V, V)


@pytest.mark.parametrize("order", ["sequential", "random"])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_samples_follow_the_random_field(order, temperature):
    """4000 independent chains after 20 sweeps: total variation to the exact p^(1/τ) under 0.04."""
    mrf = PairwiseMRF()
    out = gibbs_sample(mrf, _chains(4000), MASK, num_sweeps=20, order=order, temperature=temperature, seed=1)
    assert out[:, 0].eq(CLS).all() and out[:, 3].eq(SEP).all()
    tv = 0.5 * (_empirical(out) - mrf.joint(temperature)).abs().sum()
    assert tv < 0.04, float(tv)


def test_top_k_keeps_only_the_k_most_likely_tokens():
    mrf = PairwiseMRF()
    start = torch.tensor([[CLS, MASK, 5, SEP]]).repeat(3000, 1)  # x2 fixed: one position is sampled
    out = gibbs_sample(mrf, start, MASK, num_sweeps=1, top_k=2, seed=0)
    logits = mrf.a + mrf.W[:, 5]
    logits[:4] = -torch.inf
    top = logits.topk(2)
    expected = torch.zeros(V)
    expected[top.indices] = top.values.softmax(0)
    got = torch.bincount(out[:, 1], minlength=V) / len(out)
    assert set(out[:, 1].unique().tolist()) == set(top.indices.tolist())
    torch.testing.assert_close(got, expected, atol=0.03, rtol=0)


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_each_step_changes_only_its_position_and_sweeps_visit_each_once(order):
    mrf = PairwiseMRF()
    start = torch.tensor([[CLS, MASK, MASK, SEP], [CLS, MASK, MASK, SEP]])
    trace = gibbs_sample(mrf, start, MASK, num_sweeps=5, order=order, seed=3, return_trace=True)
    assert trace.positions.shape == (10, 2) and trace.states.shape == (10, 2, 4)
    previous = start
    for position, state in zip(trace.positions, trace.states):
        for row in range(2):
            changed = (state[row] != previous[row]).nonzero().flatten().tolist()
            assert changed in ([], [int(position[row])])
        previous = state
    for sweep in trace.positions.view(5, 2, 2):  # (steps of one sweep, B)
        assert sorted(sweep[:, 0].tolist()) == [1, 2]
    if order == "sequential":
        assert trace.positions[:, 0].tolist() == [1, 2] * 5
    assert torch.equal(trace.sequences, trace.states[-1])


def test_a_seed_gives_the_same_samples():
    mrf = PairwiseMRF()
    runs = [gibbs_sample(mrf, _chains(64), MASK, num_sweeps=3, order="random", seed=s) for s in (7, 7, 8)]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_bad_arguments_raise():
    mrf = PairwiseMRF()
    for kwargs, match in (
        (dict(order="backwards"), "order"),
        (dict(num_sweeps=0), "num_sweeps"),
        (dict(temperature=0.0), "temperature"),
        (dict(top_k=0), "top_k"),
    ):
        with pytest.raises(ValueError, match=match):
            gibbs_sample(mrf, _chains(2), MASK, **kwargs)
    with pytest.raises(ValueError, match="same number"):
        gibbs_sample(mrf, torch.tensor([[CLS, MASK, MASK, SEP], [CLS, 4, MASK, SEP]]), MASK)


def test_a_tiny_bert_samples_end_to_end():
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizer(vocab={word: i for i, word in enumerate(vocab)})
    config = HfLmBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = HfLmBertForMaskedLM(config).eval()
    ids = mrf_prompt(tokenizer, length=5, batch_size=3, prefix="the cat")
    assert tokenizer.convert_ids_to_tokens(ids[0].tolist()) == [
        "[CLS]",
        "the",
        "cat",
        *["[MASK]"] * 5,
        "[SEP]",
    ]
    kwargs = dict(num_sweeps=2, order="random", top_k=4, seed=0, banned_token_ids=tokenizer.all_special_ids)
    out = gibbs_sample(model, ids, tokenizer.mask_token_id, **kwargs)
    assert out.shape == ids.shape and torch.equal(out[:, :3], ids[:, :3]) and out[:, -1].eq(ids[0, -1]).all()
    assert out[:, 3:-1].ge(len(vocab) - len(words)).all()  # words only: no special token was sampled
    assert torch.equal(out, gibbs_sample(model, ids, tokenizer.mask_token_id, **kwargs))
    assert all(len(text.split()) == 7 for text in tokenizer.batch_decode(out, skip_special_tokens=True))
