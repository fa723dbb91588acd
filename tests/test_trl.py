"""Chat with hf_lm's own tokenizers: the GPT-family tokenizers `training.data.tokenizer.train_tokenizer`
trains carry the ChatML markers and a chat template, so `apply_chat_template` and TRL's `SFTTrainer`
on `messages` data work with a tiny hf_lm GPT."""

import pytest
import torch
from conftest import tiny_gpt_config
from transformers import AutoTokenizer

from hf_lm import HfLmGPTForCausalLM
from training.data.tokenizer import CHAT_TOKENS, GPT_SPECIAL_TOKENS, stdlib_docstrings, train_tokenizer

CONVERSATION = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What does len() return?"},
    {"role": "assistant", "content": "The number of items."},
]
CHATML = (
    "<|im_start|>system\nYou answer briefly.<|im_end|>\n"
    "<|im_start|>user\nWhat does len() return?<|im_end|>\n"
    "<|im_start|>assistant\nThe number of items.<|im_end|>\n"
)


@pytest.fixture(scope="module")
def chat_tokenizer():
    return train_tokenizer(stdlib_docstrings(max_chars=60_000), kind="byte_bpe", vocab_size=400)


def test_gpt_tokenizers_get_chatml_tokens_with_stable_ids(chat_tokenizer):
    tok = chat_tokenizer
    specials = [*dict.fromkeys(GPT_SPECIAL_TOKENS.values()), *CHAT_TOKENS]
    assert tok.convert_tokens_to_ids(specials) == [0, 1, 2, 3]
    assert set(CHAT_TOKENS) <= set(tok.all_special_tokens)
    # character tokenizers and other families' tokenizers are not chat tokenizers, unless asked
    assert train_tokenizer(["some text"] * 5, kind="char", vocab_size=40).chat_template is None
    bart = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    plain = train_tokenizer(["some text here"] * 5, kind="char", vocab_size=40, special_tokens=bart)
    assert plain.chat_template is None and "<|im_start|>" not in plain.get_vocab()
    chat = train_tokenizer(
        ["some text"] * 5, kind="char", vocab_size=40, special_tokens=bart, chat_template=True
    )
    assert chat.convert_tokens_to_ids(list(CHAT_TOKENS)) == [4, 5] and chat.chat_template
    with pytest.raises(ValueError, match="`chat_template`"):
        train_tokenizer(["some text"], kind="char", vocab_size=40, chat_template="chatml")


def test_apply_chat_template_round_trip(chat_tokenizer, tmp_path):
    chat_tokenizer.save_pretrained(tmp_path)
    for tok in (chat_tokenizer, AutoTokenizer.from_pretrained(tmp_path)):
        assert tok.apply_chat_template(CONVERSATION, tokenize=False) == CHATML
        prompt = tok.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
        assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
        encoded = tok.apply_chat_template(CONVERSATION, return_dict=True, return_assistant_tokens_mask=True)
        ids = encoded["input_ids"]
        assert tok.decode(ids) == CHATML
        assert ids.count(2) == 3 and ids.count(3) == 3  # each marker is one token, never split
        # the assistant mask covers the answer and its <|im_end|> (what the model must learn to say)
        assistant = [i for i, m in zip(ids, encoded["assistant_masks"]) if m]
        assert tok.decode(assistant) == "The number of items.<|im_end|>"


@pytest.mark.parametrize("experts", [0, 4], ids=["dense", "moe"])
def test_sft_trainer_on_messages(chat_tokenizer, tmp_path, experts):
    """SFT on chat data; a dense model is dense to TRL (no router loss), a mixture of experts gets
    TRL's load-balancing loss (TRL reads `num_experts`, `num_experts_per_tok`, `router_aux_loss_coef`)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {a} plus {b}?"},
                {"role": "assistant", "content": f"{a} plus {b} is {a + b}."},
            ]
        }
        for a in range(4)
        for b in range(2)
    ]
    tok = chat_tokenizer
    torch.manual_seed(0)
    ids = {f"{role}_token_id": getattr(tok, f"{role}_token_id") for role in ("pad", "bos", "eos")}
    config = tiny_gpt_config(
        vocab_size=len(tok), max_position_embeddings=128, num_local_experts=experts, **ids
    )
    model = HfLmGPTForCausalLM(config)
    before = model.lm_head.weight.detach().clone()
    args = trl.SFTConfig(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        assistant_only_loss=True,  # needs the template's {% generation %} markers
        max_length=128,
    )
    trainer = trl.SFTTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok
    )
    first = trainer.train_dataset[0]
    assert tok.decode(first["input_ids"]).startswith("<|im_start|>user\nWhat is 0 plus 0?<|im_end|>")
    # the loss is on the assistant's answer and its <|im_end|> only (the prompt's labels are -100)
    assert tok.decode([t for t in first["labels"] if t != -100]) == "0 plus 0 is 0.<|im_end|>"
    assert trainer.aux_loss_enabled == bool(experts)
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert not torch.equal(before, model.lm_head.weight.detach())
