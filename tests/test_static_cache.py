"""Static KV caches and compiled decoding for the Transformer families (GPT, T5, BART, Transformer).

A `StaticCache` preallocates its keys and values and counts its length in a device tensor, so a
decoding step has the same shapes at every step and `torch.compile` captures it once. These tests
check that it decodes exactly as the dynamic cache does, that one step traces as a single graph
(`fullgraph=True`, the "eager" backend: no C++ compile) without recompiling from step to step, that
`generate()`'s own compilation gives the dynamic cache's tokens, and that the families without
an attention cache (RNN, n-gram, FFNN, RNN seq2seq) ignore `cache_implementation="static"` with a
warning and generate as before.
"""

import shutil

import pytest
import torch
import transformers
from conftest import VARIANTS as GPT_VARIANTS
from conftest import tiny_gpt_config
from torch._dynamo.utils import counters
from transformers import CompileConfig, EncoderDecoderCache, StaticCache
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmFFNNConfig,
    HfLmFFNNForCausalLM,
    HfLmGPTForCausalLM,
    HfLmNGramConfig,
    HfLmNGramForCausalLM,
    HfLmRNNConfig,
    HfLmRNNForCausalLM,
    HfLmRNNSeq2SeqConfig,
    HfLmRNNSeq2SeqForConditionalGeneration,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
)

V = 99
SIZES = dict(
    vocab_size=V,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    hidden_dropout=0.0,
)

# the default config of each encoder-decoder family at a tiny size, and a deeper T5 decoder
# (generate() sizes the static cache from `decoder_layers`)
SEQ2SEQ = {
    "t5": lambda: HfLmT5ForConditionalGeneration(HfLmT5Config(**SIZES)),
    "t5_deep_decoder": lambda: HfLmT5ForConditionalGeneration(HfLmT5Config(**SIZES, decoder_layers=3)),
    "bart": lambda: HfLmBartForConditionalGeneration(HfLmBartConfig(**SIZES)),
    "transformer": lambda: HfLmBartForConditionalGeneration(
        HfLmBartConfig.from_preset("transformer", **SIZES)
    ),
}


@pytest.fixture(params=sorted(SEQ2SEQ))
def seq2seq(request):
    return SEQ2SEQ[request.param]().eval()


def source():
    """A right-padded source batch (the encoders' convention)."""
    x = torch.randint(3, V, (3, 9))
    mask = torch.ones_like(x)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    return x.masked_fill(mask == 0, 0), mask


def left_padded_prompts():
    x = torch.randint(3, 97, (2, 6))
    mask = torch.ones_like(x)
    mask[0, :2] = 0
    return x.masked_fill(mask == 0, 0), mask


def eager_compile_config() -> CompileConfig:
    """generate()'s compilation, on CPU too (it compiles only on accelerators unless told), with the
    "eager" backend: dynamo traces the step (fullgraph: a graph break is an error), nothing is built."""
    config = CompileConfig(backend="eager", fullgraph=True, mode="default")
    config._compile_all_devices = True
    return config


def assert_same_generation(a, b):
    """Same tokens, and the same logits at every step within fp32 tolerance."""
    assert torch.equal(a.sequences, b.sequences)
    assert len(a.logits) == len(b.logits)
    for step, (x, y) in enumerate(zip(a.logits, b.logits)):
        torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-5, msg=f"step {step}")


# ---------------------------------------------------------------- encoder-decoders: static == dynamic


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(num_beams=3, length_penalty=0.5, num_return_sequences=2)],
    ids=["greedy", "beam"],
)
def test_seq2seq_static_cache_generates_what_the_dynamic_cache_generates(seq2seq, kwargs):
    """A padded source batch: same tokens and the same logits at every step (the empty slots of
    the preallocated self-attention cache must stay invisible, also to T5's position bias)."""
    x, mask = source()
    common = dict(
        attention_mask=mask,
        max_new_tokens=7,
        min_new_tokens=7,
        return_dict_in_generate=True,
        output_logits=True,
        **kwargs,
    )
    dynamic = seq2seq.generate(x, **common)
    static = seq2seq.generate(x, cache_implementation="static", **common)
    assert isinstance(static.past_key_values.self_attention_cache, StaticCache)
    assert isinstance(static.past_key_values.cross_attention_cache, StaticCache)
    assert_same_generation(dynamic, static)


def test_seq2seq_static_cache_padded_batch_generates_what_each_source_generates_alone(seq2seq):
    x, mask = source()
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, num_beams=2, cache_implementation="static")
    batch = seq2seq.generate(x, attention_mask=mask, **kwargs)
    for i in range(3):
        n = int(mask[i].sum())
        alone = seq2seq.generate(x[i : i + 1, :n], **kwargs)
        assert torch.equal(batch[i, : alone.shape[1]], alone[0]), i


def seq2seq_static_cache(model, max_cache_len: int, source_len: int) -> EncoderDecoderCache:
    """What generate() builds: a static self-attention cache, and a static cross-attention cache
    exactly as long as the source."""
    config = model.config
    return EncoderDecoderCache(
        StaticCache(config=config, max_cache_len=max_cache_len),
        StaticCache(config=config, max_cache_len=source_len),
    )


def test_seq2seq_static_cache_decoding_equals_the_full_forward_with_decoder_padding(seq2seq):
    """Decoder padding too (a left-padded decoder prefix), given the two ways the model accepts it:
    (B, past + T) as a user passes it, or (B, cache length) as generate() passes it."""
    x, mask = source()
    y = torch.randint(3, V, (3, 7))
    y_mask = torch.ones_like(y)
    y_mask[0, :2] = 0
    with torch.no_grad():
        full = seq2seq(
            input_ids=x, attention_mask=mask, decoder_input_ids=y, decoder_attention_mask=y_mask
        ).logits
        enc = seq2seq.get_encoder()(input_ids=x, attention_mask=mask)
        for widen in (False, True):
            cache = seq2seq_static_cache(seq2seq, 12, x.shape[1])
            steps = []
            for start, end in ((0, 4), (4, 5), (5, 6), (6, 7)):
                step_mask = y_mask[:, :end]
                if widen:
                    step_mask = torch.nn.functional.pad(step_mask, (0, 12 - end))
                out = seq2seq(
                    encoder_outputs=enc,
                    attention_mask=mask,
                    decoder_input_ids=y[:, start:end],
                    decoder_attention_mask=step_mask,
                    past_key_values=cache,
                    use_cache=True,
                )
                steps.append(out.logits)
            torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- GPT: what tests/test_gpt_model.py does not cover


@pytest.mark.parametrize("name", sorted(GPT_VARIANTS))
def test_gpt_static_cache_step_logits_and_beam_search(name):
    """test_gpt_model.py checks greedy tokens with a static cache; here the logits of every step
    (left-padded prompts) and beam search, for every position type (learned, sinusoidal, RoPE,
    ALiBi, T5 bias, none). A wider init than GPT-2's: at std 0.02 a tiny post-norm stack's logits
    hardly depend on attention, and a mask that lets the prompt see its future went unnoticed."""
    model = HfLmGPTForCausalLM(tiny_gpt_config(**GPT_VARIANTS[name], initializer_range=0.2)).eval()
    x, mask = left_padded_prompts()
    common = dict(attention_mask=mask, max_new_tokens=6, min_new_tokens=6, pad_token_id=0)
    greedy = dict(do_sample=False, return_dict_in_generate=True, output_logits=True)
    assert_same_generation(
        model.generate(x, **common, **greedy),
        model.generate(x, cache_implementation="static", **common, **greedy),
    )
    beam = dict(num_beams=3, num_return_sequences=2, length_penalty=0.7)
    assert torch.equal(
        model.generate(x, **common, **beam),
        model.generate(x, cache_implementation="static", **common, **beam),
    )


def test_static_cache_misuse_is_a_clear_error():
    """Too many tokens for the cache, a mask neither past + T nor the cache long: ValueErrors."""
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    cache = StaticCache(config=model.config, max_cache_len=6)
    x = torch.randint(3, 97, (1, 5))
    model(x, past_key_values=cache)
    with pytest.raises(ValueError, match="holds 6 tokens: 5 cached and 2 new"):
        model(x[:, :2], past_key_values=cache)
    cache = StaticCache(config=model.config, max_cache_len=8)
    model(x, past_key_values=cache)
    with pytest.raises(ValueError, match=r"`attention_mask`.*\(1, 6\) or, with this static cache, \(1, 8\)"):
        model(x[:, :1], attention_mask=torch.ones(1, 7, dtype=torch.long), past_key_values=cache)


# ---------------------------------------------------------------- one compiled decoding step, no graph break


def compiled_decode(step_fn, n_steps: int):
    """Run `step_fn(t)` for t < n_steps under torch.compile(fullgraph=True, backend="eager"): a
    graph break raises; from the second step on any recompilation raises too."""
    torch._dynamo.reset()
    outs = []
    try:
        for t in range(n_steps):
            outs.append(step_fn(t))
            torch.compiler.set_stance("fail_on_recompile")
    finally:
        torch.compiler.set_stance("default")
    return outs


@pytest.mark.parametrize("name", sorted(GPT_VARIANTS))
def test_gpt_decoding_step_compiles_to_one_graph(name):
    """A decoding step with a StaticCache, as generate() runs it (left padding, the mask as wide as
    the cache, positions given), traces whole and is not recompiled as the cache fills."""
    model = HfLmGPTForCausalLM(tiny_gpt_config(**GPT_VARIANTS[name])).eval()
    assert model._can_compile_fullgraph
    x, mask = left_padded_prompts()
    x = torch.cat([x, torch.randint(3, 97, (2, 3))], 1)  # 6 prompt tokens, then 3 steps
    mask = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache_len = 12
    with torch.no_grad():
        full = model(x, attention_mask=mask).logits
        cache = StaticCache(config=model.config, max_cache_len=cache_len)
        model(x[:, :6], attention_mask=mask[:, :6], past_key_values=cache)
        step = torch.compile(model.forward, fullgraph=True, backend="eager")
        wide = torch.nn.functional.pad(mask, (0, cache_len - mask.shape[1]))

        def run(t):
            t += 6
            m = wide.clone()
            m[:, t + 1 :] = 0  # the slots not filled yet
            return step(
                x[:, t : t + 1], attention_mask=m, position_ids=positions[:, t : t + 1], past_key_values=cache
            )

        steps = compiled_decode(run, 3)
    torch.testing.assert_close(torch.cat([s.logits for s in steps], 1), full[:, 6:], atol=1e-5, rtol=1e-5)


def test_seq2seq_decoding_step_compiles_to_one_graph(seq2seq):
    """A decoding step with an EncoderDecoderCache of StaticCaches, as generate() runs it, traces
    whole and is not recompiled as the cache fills."""
    assert seq2seq._can_compile_fullgraph
    x, mask = source()
    y = torch.randint(3, V, (3, 7))
    with torch.no_grad():
        full = seq2seq(input_ids=x, attention_mask=mask, decoder_input_ids=y).logits
        enc = seq2seq.get_encoder()(input_ids=x, attention_mask=mask)
        cache = seq2seq_static_cache(seq2seq, 10, x.shape[1])
        first = seq2seq(
            encoder_outputs=enc,
            attention_mask=mask,
            decoder_input_ids=y[:, :4],
            past_key_values=cache,
            use_cache=True,
        )
        step = torch.compile(seq2seq.forward, fullgraph=True, backend="eager")

        def run(t):
            t += 4
            return step(
                encoder_outputs=enc,
                attention_mask=mask,
                decoder_input_ids=y[:, t : t + 1],
                past_key_values=cache,
                use_cache=True,
            )

        steps = compiled_decode(run, 3)
    got = torch.cat([first.logits] + [s.logits for s in steps], 1)
    torch.testing.assert_close(got, full, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- generate()'s own compilation


def test_generate_compiles_static_cache_decoding_into_one_graph():
    """generate() compiles the decoding step when the cache is static (on accelerators by default;
    here forced on CPU): the dynamic cache's tokens and logits, from one graph for all steps."""
    models = {
        "gpt": HfLmGPTForCausalLM(tiny_gpt_config(**GPT_VARIANTS["llama"])).eval(),
        "t5": SEQ2SEQ["t5"]().eval(),
        "bart": SEQ2SEQ["bart"]().eval(),
    }
    for name, model in models.items():
        x, mask = left_padded_prompts() if name == "gpt" else source()
        common = dict(
            attention_mask=mask,
            max_new_tokens=6,
            min_new_tokens=6,
            pad_token_id=0,
            return_dict_in_generate=True,
            output_logits=True,
        )
        dynamic = model.generate(x, **common)
        torch._dynamo.reset()
        counters.clear()
        compiled = model.generate(
            x, cache_implementation="static", compile_config=eager_compile_config(), **common
        )
        assert hasattr(model, "_compiled_call"), f"{name}: generate() did not compile"
        assert counters["stats"]["unique_graphs"] == 1, f"{name}: {dict(counters['stats'])}"
        assert_same_generation(dynamic, compiled)


def has_cxx_compiler() -> bool:
    return any(shutil.which(c) for c in ("g++", "clang++", "c++"))


@pytest.mark.slow  # inductor builds C++ kernels: ~20 s a model on one CPU core
@pytest.mark.skipif(not has_cxx_compiler(), reason="inductor needs a C++ compiler on CPU")
@pytest.mark.parametrize("name", ["gpt", "t5"])
def test_generate_with_inductor_gives_the_dynamic_cache_tokens(name):
    """The real thing: generate() compiling with inductor (what it does on a GPU by default, minus
    CUDA graphs) gives the dynamic cache's tokens."""
    if name == "gpt":
        model = HfLmGPTForCausalLM(tiny_gpt_config(**GPT_VARIANTS["llama"])).eval()
        x, mask = left_padded_prompts()
    else:
        model = SEQ2SEQ["t5"]().eval()
        x, mask = source()
    kwargs = dict(attention_mask=mask, max_new_tokens=6, min_new_tokens=6, pad_token_id=0)
    config = CompileConfig(backend="inductor", fullgraph=True, mode="default")
    config._compile_all_devices = True
    torch._dynamo.reset()
    compiled = model.generate(x, cache_implementation="static", compile_config=config, **kwargs)
    assert hasattr(model, "_compiled_call")
    assert torch.equal(compiled, model.generate(x, **kwargs))


# ---------------------------------------------------------------- families without an attention cache


def no_attention_cache_models():
    seqs = [[int(c) for c in "3333110571120573333371205711120563"]]
    return {
        "rnn": HfLmRNNForCausalLM(
            HfLmRNNConfig(vocab_size=12, hidden_size=16, num_hidden_layers=2, pad_token_id=0)
        ),
        "ffnn": HfLmFFNNForCausalLM(
            HfLmFFNNConfig(vocab_size=12, context_size=3, hidden_size=8, intermediate_size=16, pad_token_id=0)
        ),
        "ngram": HfLmNGramForCausalLM.fit(seqs, HfLmNGramConfig(vocab_size=12, order=3)),
        "rnn_seq2seq": HfLmRNNSeq2SeqForConditionalGeneration(
            HfLmRNNSeq2SeqConfig(
                vocab_size=12,
                embedding_size=8,
                hidden_size=16,
                encoder_layers=1,
                decoder_layers=1,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
            )
        ),
    }


@pytest.mark.parametrize("name", ["rnn", "ffnn", "ngram", "rnn_seq2seq"])
def test_families_without_an_attention_cache_ignore_a_static_cache_with_a_warning(name):
    """transformers' generate() logs that `cache_implementation` is ignored, and they generate
    exactly what they generate without it. They do not claim to compile (`_can_compile_fullgraph`)."""
    model = no_attention_cache_models()[name].eval()
    assert not model._can_compile_fullgraph
    x = torch.randint(3, 12, (2, 5))
    kwargs = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    for extra in (dict(), dict(num_beams=2)):
        expected = model.generate(x, **kwargs, **extra)
        logger = logging.get_logger("transformers")
        logger.warning_once.cache_clear()  # a warning shown earlier in this process is not repeated
        with CaptureLogger(logger) as captured:
            got = model.generate(x, cache_implementation="static", **kwargs, **extra)
        assert "cache_implementation" in captured.out
        assert torch.equal(got, expected)


def test_gpu_checks_compiled_static_case_and_what_it_catches(monkeypatch):
    """`make gpu-check`'s `<family>/compiled_static`: every family with a static cache, compiled by
    `generate()` in one graph with the dynamic cache's tokens (eager backend here, Inductor on a GPU);
    a cache that `generate()` would not compile fails it."""
    from gpu_cases import run_compiled_static_case

    from hf_lm.testing import STATIC_CACHE_CASES

    names = ["gpt-causal-lm", "t5-seq2seq-lm", "bart-seq2seq-lm", "gpt-moe-causal-lm", "t5-moe-seq2seq-lm"]
    # each is a `families/<name>/compiled_static` case of tests/test_cuda.py
    assert [case.name for case in STATIC_CACHE_CASES] == names
    assert run_compiled_static_case("bart-seq2seq-lm", "cpu") == (
        "eager, 1 graph(s) with fullgraph=True; tokens = the dynamic cache's"
    )
    monkeypatch.setattr(transformers.cache_utils.StaticLayer, "is_compileable", False)
    with pytest.raises(AssertionError, match="did not compile the decoding step"):
        run_compiled_static_case("t5-seq2seq-lm", "cpu")
