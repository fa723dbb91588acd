"""PEFT on hf_lm models with peft's defaults: `get_peft_model(model, LoraConfig(task_type=...))` with no
`target_modules`, for every head of every family that has weights (hf_lm.integrations registers the
defaults at `import hf_lm`). Each adapter trains (only adapter weights change), merges into the
weights exactly, and round-trips through `save_pretrained` / `PeftModel.from_pretrained`."""

from pathlib import Path

import pytest
import torch

peft = pytest.importorskip("peft")

from peft import IA3Config, LoraConfig, PeftModel, get_peft_model  # noqa: E402
from remote_code import run_fresh_interpreter  # noqa: E402

from hf_lm.integrations import LORA_TARGET_MODULES, LORA_TARGET_PARAMETERS  # noqa: E402
from hf_lm.testing import FAMILY_CASES  # noqa: E402

# peft's task type of each head, by class-name suffix (None: the plain PeftModel)
TASK_TYPES = {
    "ForCausalLM": "CAUSAL_LM",
    "ForConditionalGeneration": "SEQ_2_SEQ_LM",
    "ForSequenceClassification": "SEQ_CLS",
    "ForTokenClassification": "TOKEN_CLS",
    "ForQuestionAnswering": "QUESTION_ANS",
}
# The heads that compute a loss (the bare models have none to train on). Not the n-gram model (no
# weights). The recurrent LM's defaults are its recurrent weights (`target_parameters`).
CASES = [case for case in FAMILY_CASES if case.name != "ngram-causal-lm" and "labels" in case.make_batch()]


def _task_type(case) -> str | None:
    return next(
        (task for suffix, task in TASK_TYPES.items() if case.model_class.__name__.endswith(suffix)), None
    )


def _lora_config(case) -> LoraConfig:
    return LoraConfig(task_type=_task_type(case), r=4, lora_alpha=8)


def _tensors(output) -> list[torch.Tensor]:
    """Every tensor of a model output (loss, logits, hidden states), caches left out."""
    return [value for value in output.to_tuple() if isinstance(value, torch.Tensor)]


def _assert_same(a, b, atol=1e-5) -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert len(ta) == len(tb) > 0
    for x, y in zip(ta, tb):
        torch.testing.assert_close(x, y, atol=atol, rtol=1e-4)


def _train(model, batch, steps: int = 8) -> list[float]:
    """A few AdamW steps on one batch; returns the losses. Asserts that only adapter weights get gradients."""
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    assert trainable, "no trainable parameters"
    for name, _ in trainable:
        assert "lora_" in name or "modules_to_save" in name or "ia3_" in name, name
    optimizer = torch.optim.AdamW([p for _, p in trainable], lr=3e-2)
    model.train()
    losses = []
    for _ in range(steps):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        frozen = [n for n, p in model.named_parameters() if not p.requires_grad and p.grad is not None]
        assert not frozen, f"frozen weights got gradients: {frozen[:3]}"
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@pytest.mark.parametrize("case", CASES, ids=str)
def test_lora_with_peft_defaults_trains_merges_and_round_trips(case, tmp_path: Path):
    model = case.make_model(seed=0)
    batch = case.make_batch(seed=1)
    with torch.no_grad():
        base_out = model(**batch)
    peft_model = get_peft_model(model, _lora_config(case))
    assert any("lora_" in name for name, _ in peft_model.named_parameters())

    losses = _train(peft_model, batch)
    assert losses[-1] < losses[0], losses
    # the low-rank factors were trained: B starts at zero and is not zero any more
    lora_b = [p for name, p in peft_model.named_parameters() if "lora_B" in name]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)

    with torch.no_grad():
        adapted = peft_model(**batch)
        assert not torch.allclose(_tensors(adapted)[0], _tensors(base_out)[0])

        # save and reload onto a fresh copy of the same base weights
        peft_model.save_pretrained(tmp_path / "adapter")
        reloaded = PeftModel.from_pretrained(case.make_model(seed=0), tmp_path / "adapter").eval()
        _assert_same(reloaded(**batch), adapted)

        # merging the adapter into the weights gives the adapted model's outputs, with no peft layer left
        merged = peft_model.merge_and_unload()
        assert type(merged) is case.model_class
        assert not any("lora_" in name for name, _ in merged.named_parameters())
        _assert_same(merged(**batch), adapted)


def test_lora_defaults_are_attention_projections_as_for_llama():
    """GPT's default targets are its fused attention projections, one per layer, and nothing else."""
    case = next(c for c in FAMILY_CASES if c.name == "gpt-causal-lm")
    peft_model = get_peft_model(case.make_model(), LoraConfig(task_type="CAUSAL_LM"))
    targeted = sorted(peft_model.base_model.targeted_module_names)
    assert targeted == [f"model.layers.{i}.self_attn.query_key_value" for i in range(2)], targeted
    assert peft_model.peft_config["default"].target_modules == set(LORA_TARGET_MODULES["hflm_gpt"])


def test_ia3_with_peft_defaults_trains():
    case = next(c for c in FAMILY_CASES if c.name == "gpt-causal-lm")
    batch = case.make_batch(seed=1)
    peft_model = get_peft_model(case.make_model(), IA3Config(task_type="CAUSAL_LM"))
    losses = _train(peft_model, batch)
    assert losses[-1] < losses[0], losses


def test_shipped_model_code_never_imports_peft():
    models = Path(__file__).resolve().parents[1] / "hf_lm" / "models"
    for path in models.glob("*.py"):
        assert "peft" not in path.read_text(), path.name


def test_recurrent_lm_lora_defaults_adapt_the_recurrent_weights_on_every_path():
    """The recurrent LM's default LoRA adapts every layer's weight_ih and weight_hh, and the adapter acts
    on each path that reads them: the fused kernel, the loop, and cached one-token decoding."""
    case = next(c for c in FAMILY_CASES if c.name == "rnn-causal-lm")
    model = case.make_model(seed=0)
    batch = case.make_batch(seed=1)
    with torch.no_grad():
        base = model(**batch).logits
    peft_model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", init_lora_weights=False))
    assert peft_model.peft_config["default"].target_parameters == LORA_TARGET_PARAMETERS["hflm_rnn"]
    layers = model.config.num_hidden_layers
    targeted = sorted(peft_model.base_model.targeted_parameter_names)
    assert targeted == sorted(f"model.rnn.layers.{i}.weight_{w}" for i in range(layers) for w in ("ih", "hh"))
    rnn = peft_model.base_model.model.model.rnn
    peft_model.eval()
    with torch.no_grad():
        rnn.rnn_implementation = "fused"
        fused = peft_model(**batch).logits
        rnn.rnn_implementation = "loop"
        loop = peft_model(**batch).logits
        rnn.rnn_implementation = "fused"
        assert not torch.allclose(fused, base, atol=1e-4)  # the adapter acts (init_lora_weights=False)
        torch.testing.assert_close(fused, loop, atol=1e-5, rtol=1e-4)
        prompt = batch["input_ids"][:, :3]
        adapted_tokens = peft_model.generate(input_ids=prompt, max_new_tokens=5, do_sample=False)
        merged = peft_model.merge_and_unload()
        torch.testing.assert_close(merged(**batch).logits, fused, atol=1e-5, rtol=1e-4)
        assert torch.equal(
            merged.generate(input_ids=prompt, max_new_tokens=5, do_sample=False), adapted_tokens
        )


def test_recurrent_lm_lora_on_its_untied_output_layer():
    """With untied embeddings, LoRA on `lm_head` adapts and merges exactly."""
    case = next(c for c in FAMILY_CASES if c.name == "rnn-causal-lm")
    config = case.make_config()
    config.tie_word_embeddings = False
    torch.manual_seed(0)
    model = case.model_class(config).eval()
    batch = case.make_batch()
    peft_model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", target_modules=["lm_head"]))
    losses = _train(peft_model, batch)
    assert losses[-1] < losses[0], losses
    with torch.no_grad():
        adapted = peft_model(**batch)
        _assert_same(peft_model.merge_and_unload()(**batch), adapted)


def test_adapter_loads_where_hf_lm_is_not_installed(tmp_path: Path):
    """A saved adapter records its target modules: a remote-code folder and the adapter load without hf_lm
    and give the adapted outputs. There, peft has no defaults for hf_lm's model types (it reads none
    from the config), so a LoraConfig without target_modules is refused, as documented."""
    case = next(c for c in FAMILY_CASES if c.name == "gpt-causal-lm")
    batch = case.make_batch(seed=1)
    case.make_model(seed=0).save_pretrained(tmp_path / "base")
    peft_model = get_peft_model(case.make_model(seed=0), LoraConfig(task_type="CAUSAL_LM"))
    _train(peft_model, batch, steps=3)
    peft_model.save_pretrained(tmp_path / "adapter")
    torch.save(batch, tmp_path / "batch.pt")
    with torch.no_grad():
        torch.save(peft_model(**batch).logits, tmp_path / "expected.pt")
    run_fresh_interpreter(
        """
        import sys
        sys.modules["hf_lm"] = None  # hf_lm cannot be imported
        import torch
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModelForCausalLM

        load = lambda: AutoModelForCausalLM.from_pretrained("base", trust_remote_code=True).eval()
        batch, expected = torch.load("batch.pt"), torch.load("expected.pt")
        with torch.no_grad():
            logits = PeftModel.from_pretrained(load(), "adapter").eval()(**batch).logits
        torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-4)
        try:
            get_peft_model(load(), LoraConfig(task_type="CAUSAL_LM"))
        except ValueError as err:
            assert "target_modules" in str(err), err
        else:
            raise AssertionError("peft found defaults without hf_lm")
        """,
        cwd=tmp_path,
    )


# the recurrent LM's only nn.Linear is its output layer, which "all-linear" leaves out (its recurrent
# weights are parameters: test_recurrent_lm_lora_defaults_adapt_the_recurrent_weights_on_every_path)
ALL_LINEAR_CASES = [case for case in CASES if case.name != "rnn-causal-lm"]


@pytest.mark.parametrize("case", ALL_LINEAR_CASES, ids=str)
def test_lora_on_every_linear_layer_reaches_the_loss(case):
    """`target_modules="all-linear"`: every adapted layer's output reaches the loss, so each adapter's
    B matrix gets a non-zero gradient at the first step (A's is 0 while B is 0). A layer whose weight
    the model reads without calling the layer (a router's `F.linear(h, gate.weight)`) would leave its
    adapter out of the model. Experts no token was routed to are the exception. No task type: peft's
    TOKEN_CLS would also keep a copy of the classifier that "all-linear" adapts, which peft refuses
    for transformers' own token classifiers too."""
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")
    model = get_peft_model(case.make_model(), config).train()
    model(**case.make_batch()).loss.backward()
    lora_b = {name: p for name, p in model.named_parameters() if "lora_B" in name}
    assert lora_b, "no layer adapted"
    dead = [n for n, p in lora_b.items() if (p.grad is None or not p.grad.any()) and ".experts." not in n]
    assert not dead, dead
