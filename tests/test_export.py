"""`torch.export` and transformers' ExecuTorch recipes (transformers.integrations.executorch).

- A causal LM exports with a dynamic sequence length starting at 1 (and at 2, torch's default
  floor), strict (dynamo) and non-strict, and the program's logits equal eager ones at every length:
  nothing in the forward branches on the length (the CPU few-rows path of `VocabProjection` is
  eager-only).
- The decoder-only recipe (`TorchExportableModuleForDecoderOnlyLM`, a `StaticCache` held as
  buffers) exports with a dynamic prefill length; chunked prefill and greedy decoding through the
  program equal eager `forward` and `generate()`.
- The seq2seq recipe (`Seq2SeqLMExportableModule`) exports the encoder (dynamic source length)
  and the decoder step (a `StaticCache`) as two programs, which needs `config.d_model` and each
  stack to own the shared embedding as a registered submodule; its tokens and logits equal eager.
- The shared embedding stays one tensor with one checkpoint key, so folders saved before the stacks
  registered it load without missing or unexpected keys.

The recipe's own `TorchExportableModuleWithStaticCache.generate` is not used: in transformers 5.24
it feeds each generated token one cache slot past its position (`cache_position=len(tokens)` after
appending it), so its output is not eager greedy decoding for any model. The tests decode with the
exported program directly, one position per token.
"""

import warnings

import pytest
import torch
from conftest import VARIANTS as GPT_VARIANTS
from conftest import tiny_gpt_config
from safetensors.torch import save_file
from test_static_cache import SIZES as SEQ2SEQ_SIZES  # the tiny encoder-decoder sizes
from transformers.integrations.executorch import (
    Seq2SeqLMExportableModule,
    TorchExportableModuleForDecoderOnlyLM,
)

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBartModel,
    HfLmGPTForCausalLM,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
)

GPT = ["gpt2", "llama"]  # learned positions, tied head; RoPE + grouped-query attention, untied


def gpt(name: str) -> HfLmGPTForCausalLM:
    torch.manual_seed(0)
    return HfLmGPTForCausalLM(tiny_gpt_config(**GPT_VARIANTS[name])).eval()


class LogitsOf(torch.nn.Module):
    """(B, T) ids and mask -> (B, T, V) logits: the model without cache, a plain-tensor signature."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def batch(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of `length` tokens, the second left-padded over its first half."""
    ids = torch.randint(3, 97, (2, length))
    mask = torch.ones_like(ids)
    mask[1, : length // 2] = 0
    return ids, mask


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
@pytest.mark.parametrize("min_length", [1, 2])
@pytest.mark.parametrize("name", GPT)
def test_causal_lm_exports_with_a_dynamic_length(name, min_length, strict):
    model = LogitsOf(gpt(name))
    length = torch.export.Dim("length", min=min_length, max=64)
    with torch.no_grad():
        program = torch.export.export(
            model,
            batch(8),
            dynamic_shapes={"input_ids": {1: length}, "attention_mask": {1: length}},
            strict=strict,
        )
    exported = program.module()
    # 1-4 tokens in two rows are the 2-8 rows around the eager few-rows path of the LM head
    for n in sorted({min_length, 2, 3, 4, 5, 17, 64}):
        ids, mask = batch(n)
        with torch.no_grad():
            torch.testing.assert_close(exported(ids, mask), model(ids, mask), msg=f"length {n}")


def static_gpt(name: str) -> HfLmGPTForCausalLM:
    model = gpt(name)
    model.generation_config.cache_implementation = "static"  # the recipe's requirement
    return model


@pytest.mark.parametrize("name", GPT)
def test_decoder_only_recipe_decodes_as_eager(name):
    model = static_gpt(name)
    recipe = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=32)
    prompt = torch.randint(3, 97, (1, 5))
    length = torch.export.Dim("length", min=1, max=32)
    with torch.no_grad():
        program = recipe.export(
            input_ids=prompt,
            cache_position=torch.arange(5),
            dynamic_shapes={"input_ids": {1: length}, "cache_position": {0: length}},
        )
    step = program.module()
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=10, do_sample=False, eos_token_id=None)
        # greedy decoding through the program: the prompt in one call, then a token per call
        tokens, logits = prompt, step(input_ids=prompt, cache_position=torch.arange(5))
        while tokens.shape[1] < expected.shape[1]:
            token = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
            tokens = torch.cat([tokens, token], dim=1)
            logits = step(input_ids=token, cache_position=torch.tensor([tokens.shape[1] - 1]))
        assert tokens.tolist() == expected.tolist()
        # chunked prefill of 1, 2, 3 and 9 tokens (the static cache is reset from cache_position)
        full = model(expected).logits  # (1, 15, V)
        chunks = [(0, 1), (1, 3), (3, 6), (6, 15)]
        got = torch.cat(
            [step(input_ids=expected[:, a:b], cache_position=torch.arange(a, b)) for a, b in chunks], 1
        )
    torch.testing.assert_close(got, full)


SEQ2SEQ = {
    "t5": lambda: HfLmT5ForConditionalGeneration(HfLmT5Config(**SEQ2SEQ_SIZES)),
    "t5_v1_1": lambda: HfLmT5ForConditionalGeneration(HfLmT5Config.from_preset("t5_v1_1", **SEQ2SEQ_SIZES)),
    "bart": lambda: HfLmBartForConditionalGeneration(HfLmBartConfig(**SEQ2SEQ_SIZES)),
}


def seq2seq(name: str):
    torch.manual_seed(0)
    model = SEQ2SEQ[name]().eval()
    with torch.no_grad():
        # wider matrices than the init's, so greedy decoding does not repeat one token
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.5)
    return model


@pytest.mark.parametrize("name", sorted(SEQ2SEQ))
def test_seq2seq_recipe_decodes_as_eager(name):
    model = seq2seq(name)
    with warnings.catch_warnings():
        # dynamo notes the cross-attention cache the decoder fills while traced: the program
        # recomputes the cross-attention keys from `encoder_hidden_states` at every step
        warnings.filterwarnings("ignore", message="While compiling, we found certain side effects")
        recipe = Seq2SeqLMExportableModule(model, max_hidden_seq_length=64, max_cache_length=32).export()
    encoder, decoder = recipe.exported_encoder.module(), recipe.exported_decoder.module()
    # T5 scales the decoder output by hidden_size**-0.5 before its tied head; the recipe applies
    # `lm_head` to the decoder output as it is (transformers' own T5 too): logits differ by that
    # positive factor, greedy tokens do not
    scale = model.config.hidden_size**-0.5 if model.config.scale_decoder_output else 1.0
    generated = set()
    for n in (1, 2, 7, 12):  # the encoder's source length is dynamic
        source = torch.randint(3, 99, (1, n))
        with torch.no_grad():
            states = encoder(source)
            torch.testing.assert_close(states, model.get_encoder()(input_ids=source).last_hidden_state)
            tokens = recipe.generate(source, max_new_tokens=8)
            # the recipe starts every target from token 0 (T5's start; BART's is 2)
            expected = model.generate(source, decoder_start_token_id=0, max_new_tokens=7, do_sample=False)
            assert tokens == expected[0, : len(tokens)].tolist(), f"source length {n}"
            target = torch.tensor([tokens])
            steps = [decoder(target[:, i : i + 1], states, torch.tensor([i])) for i in range(len(tokens))]
            eager = model(input_ids=source, decoder_input_ids=target).logits
        # cached one-token steps against one pass over the target: fp32 sums in another order, on
        # logits of magnitude ~10
        torch.testing.assert_close(torch.cat(steps, 1) * scale, eager, atol=5e-4, rtol=1e-4)
        generated.update(tokens[1:])
    assert len(generated) > 3  # the comparison saw varied tokens, not one repeated


def stack_aliases(model) -> set[str]:
    """Names under which the encoder and decoder stacks hold the shared embedding's weights."""
    return {k for k, _ in model.named_parameters(remove_duplicate=False) if "coder.token_embedding." in k}


@pytest.mark.parametrize("name", sorted(SEQ2SEQ))
def test_shared_embedding_is_registered_once_and_saved_once(name, tmp_path):
    model = seq2seq(name)
    shared = model.get_input_embeddings()
    assert model.get_encoder().token_embedding is shared and model.get_decoder().token_embedding is shared
    # registered in both stacks (torch.export and module moves see it) ...
    assert stack_aliases(model) == {
        "model.encoder.token_embedding.weight",
        "model.decoder.token_embedding.weight",
    }
    # ... and one parameter, under one name, in the state dict as before
    names = [k for k, p in model.named_parameters() if p is shared.weight]
    assert names == ["model.embed_tokens.weight"]
    state = model.state_dict()
    assert not any("coder.token_embedding." in k for k in state)
    tied = model.config.tie_word_embeddings
    assert (model.lm_head.weight is shared.weight) == tied
    assert "token_embedding.weight" not in model.get_encoder().state_dict()

    # a folder with the checkpoint keys the model always had: the tied head is not written
    folder = tmp_path / "old"
    model.save_pretrained(folder)
    old_keys = {k for k in state if not (tied and k == "lm_head.weight")}
    state = {k: v.contiguous() for k, v in state.items() if k in old_keys}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    loaded, info = type(model).from_pretrained(folder, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    loaded.eval()
    embedding = loaded.get_input_embeddings()
    assert (
        loaded.get_encoder().token_embedding is embedding
        and loaded.get_decoder().token_embedding is embedding
    )
    assert (loaded.lm_head.weight is embedding.weight) == tied
    source, target = torch.randint(3, 99, (2, 6)), torch.randint(3, 99, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(input_ids=source, decoder_input_ids=target).logits,
            model(input_ids=source, decoder_input_ids=target).logits,
        )
    # torch's own strict loading of the old key set reports nothing missing
    fresh = SEQ2SEQ[name]()
    result = fresh.load_state_dict(state, strict=False)
    assert result.unexpected_keys == [] and result.missing_keys == (["lm_head.weight"] if tied else [])
    torch.testing.assert_close(fresh.get_encoder().token_embedding.weight, shared.weight)


def test_new_input_embeddings_reach_both_stacks():
    model = HfLmBartModel(HfLmBartConfig(**SEQ2SEQ_SIZES))
    new = torch.nn.Embedding(99, 32)
    model.set_input_embeddings(new)
    assert model.encoder.token_embedding is new and model.decoder.token_embedding is new
    assert dict(model.named_modules(remove_duplicate=False))["encoder.token_embedding"] is new
    assert list(model.state_dict()).count("embed_tokens.weight") == 1
    model.resize_token_embeddings(120)
    assert model.encoder.token_embedding is model.embed_tokens is model.decoder.token_embedding
    assert model.embed_tokens.num_embeddings == 120


def test_d_model_is_hidden_size():
    config = HfLmT5Config(**SEQ2SEQ_SIZES)
    assert config.d_model == 32
    config.d_model = 48
    assert config.hidden_size == 48
    assert "d_model" not in config.to_dict()
    assert HfLmBartConfig(**{**SEQ2SEQ_SIZES, "hidden_size": 64}).d_model == 64


@pytest.mark.parametrize("name", ["t5_v1_1", "bart"])
def test_offloaded_to_disk_the_stacks_find_the_shared_embedding(name, tmp_path):
    """accelerate's disk offload loads a module's weights under the name it is registered by: the
    stacks' `token_embedding` entries come from the parent's, tied head or not (tests/
    test_model_properties.py sweeps the default configs)."""
    model = seq2seq(name)
    model.save_pretrained(tmp_path / "model")
    offloaded = (
        type(model)
        .from_pretrained(
            tmp_path / "model", device_map="auto", max_memory={"cpu": 1}, offload_folder=tmp_path / "offload"
        )
        .eval()
    )
    assert set(offloaded.hf_device_map.values()) == {"disk"}
    source, target = torch.randint(3, 99, (2, 6)), torch.randint(3, 99, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(
            offloaded(input_ids=source, decoder_input_ids=target).logits,
            model(input_ids=source, decoder_input_ids=target).logits,
        )
