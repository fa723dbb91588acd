"""The masked-LM objective of the training loop: seeded masks and pseudo-perplexity."""

import torch
from test_bert_model import tiny_bert_config

from hf_lm import HfLmBertForMaskedLM
from training.data.collators_mlm import DataCollatorForMaskedLM
from training.data.tokenizer import BERT_SPECIAL_TOKENS, train_tokenizer
from training.objectives import mask_seed, mlm_inputs
from training.objectives.evaluation import masked_lm_scores, pseudo_log_likelihood

TEXTS = [
    f"the {a} {b} sat on the {c} mat today"
    for a in ("red", "big", "old")
    for b in ("cat", "dog")
    for c in ("new", "flat")
]


def tokenizer():
    return train_tokenizer(TEXTS * 5, kind="wordpiece", vocab_size=80, special_tokens=BERT_SPECIAL_TOKENS)


def test_masks_are_a_pure_function_of_the_seed():
    tok = tokenizer()
    collator = DataCollatorForMaskedLM(tok)
    blocks = {"input_ids": torch.tensor(tok(TEXTS[:8], padding=True)["input_ids"])}
    a = mlm_inputs(blocks, collator, mask_seed(0, 5, 0, 0))
    collator(  # draws from other generators in between change nothing
        [{"input_ids": r} for r in blocks["input_ids"]]
    )
    b = mlm_inputs(blocks, collator, mask_seed(0, 5, 0, 0))
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = mlm_inputs(blocks, collator, mask_seed(0, 5, 0, 1))  # another rank: another mask
    assert not torch.equal(a["labels"], c["labels"])
    assert len({mask_seed(0, s, m, r) for s in range(4) for m in range(2) for r in range(2)}) == 16


def test_pseudo_log_likelihood_equals_masking_one_token_at_a_time():
    tok = tokenizer()
    model = HfLmBertForMaskedLM(tiny_bert_config(vocab_size=len(tok), pad_token_id=tok.pad_token_id)).eval()
    enc = tok(TEXTS[:3], ["on the mat"] * 3, padding=True, return_tensors="pt")
    enc["attention_mask"][2, -1] = 0  # one more padded position
    special = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    total, n = pseudo_log_likelihood(
        model, enc["input_ids"], tok.mask_token_id, special, enc["attention_mask"], batch_size=7
    )
    expected, count = 0.0, 0
    with torch.no_grad():
        for b in range(3):
            for t in range(enc["input_ids"].shape[1]):
                token = int(enc["input_ids"][b, t])
                if token in special or not enc["attention_mask"][b, t]:
                    continue
                x = enc["input_ids"][b : b + 1].clone()
                x[0, t] = tok.mask_token_id
                logits = model(x, attention_mask=enc["attention_mask"][b : b + 1]).logits
                expected += float(logits[0, t].log_softmax(-1)[token])
                count += 1
    assert n == count > 0
    assert abs(total - expected) < 1e-3


def test_masked_lm_scores_count_only_masked_tokens():
    model = HfLmBertForMaskedLM(tiny_bert_config()).eval()
    x = torch.randint(3, 101, (2, 6))
    labels = torch.full_like(x, -100)
    labels[0, 1], labels[1, 4] = 7, 9
    loss, correct, n = masked_lm_scores(model, x, labels)
    with torch.no_grad():
        logits = model(x).logits
    picked = logits[[0, 1], [1, 4]]
    assert n == 2 and correct == int((picked.argmax(-1) == torch.tensor([7, 9])).sum())
    assert (
        abs(loss - float(torch.nn.functional.cross_entropy(picked, torch.tensor([7, 9]), reduction="sum")))
        < 1e-4
    )
