"""What `benchmarks.gpu` runs, as data: the entries (one command each, grouped in sections), the
sizes of its own measurements, issue 13's targets, the rows of its measurements and their tables.

An entry is `{section, argv, limit, reads}` and optionally `full` (flags added at full size),
`smoke` (flags added at smoke size on the CPU, or None: not run there), `on_demand` (run only when `--entries` names it) and `nanogpt`
(a karpathy/nanoGPT script, run from a prepared copy of `--nanogpt_dir`). `argv` follows
`python -m`, or is a script path; `reads` names the reader of what it wrote (`gpu.READERS`).
"""

from __future__ import annotations

# the pytest command of `make gpu-check` (tests/test_cuda.py), its table written to the entry's folder
CUDA_TESTS = ["pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "tests/test_cuda.py"]
# the recipe at tiny size: the same config file, overridden
RECIPE = ["training.train", "training/configs/shakespeare_char.yaml", "--report_to", "csv"]
RECIPE_SMOKE = (
    "--max_steps 4 --eval_every 2 --save_every 2 --num_hidden_layers 1 --hidden_size 32 --num_attention_heads 2 "
    "--intermediate_size 64 --per_device_batch_size 4 --block_size 32 --torch_compile false --tf32 false "
    "--mixed_precision no --log_every 1 --eval_batches 2"
).split()
NANOGPT_SMOKE = (
    "--device=cpu --compile=False --dtype=float32 --max_iters=10 --lr_decay_iters=10 --eval_interval=5 "
    "--eval_iters=2 --log_interval=5 --batch_size=4 --block_size=32 --n_layer=1 --n_head=2 --n_embd=32"
).split()
MEASURE = ["benchmarks.gpu", "--measure"]
MEASURE_SMOKE = ["--smoke", "--device", "cpu", "--no_compile"]
# the translation leaderboard (its GPU preset on a GPU, its smoke preset at smoke size)
TRANSLATION = ["benchmarks.leaderboard", "translation", "--data", "{multi30k}", "--entries"]
TRANSLATION_SMOKE = ["--smoke", "--device", "cpu"]
# the whole budget with the rate decaying over it, and label smoothing 0.1 (Vaswani et al.)
BUDGET_LINEAR = ["--max_epochs", "1000", "--budget_schedule", "linear", "--label_smoothing", "0.1"]
CHECK_SMOKE = ["--gpu-check-device", "cpu", "-k"]

ENTRIES: dict[str, dict] = {
    "check": dict(section="check", argv=CUDA_TESTS, full=["-k", "not leaderboards/"], limit=540, reads="check",
                  smoke=[*CHECK_SMOKE, "tools/evaluate_cli/fp32"]),
    # the eager rows first, so that a compilation slower than expected cannot take them with it
    "train_eager": dict(section="train", argv=[*MEASURE, "gpt_train", "--no_compile"], limit=200,
                        reads="measured", smoke=MEASURE_SMOKE),
    "train": dict(section="train", argv=[*MEASURE, "gpt_train,head_loss"], limit=540, reads="measured",
                  smoke=MEASURE_SMOKE),
    # the config ends its cosine at step 2,000; the variants: nanoGPT's 5,000 steps, rotary positions
    "recipe_hf_lm": dict(section="recipe", argv=RECIPE, limit=150, reads="train_run", smoke=RECIPE_SMOKE),
    "recipe_nanogpt": dict(section="recipe", argv=["train.py", "config/train_shakespeare_char.py"],
                           limit=220, reads="nanogpt", nanogpt=True, smoke=NANOGPT_SMOKE),
    "recipe_hf_lm_5000_steps": dict(section="recipe", argv=[*RECIPE, "--max_steps", "5000"], limit=200,
                                    reads="train_run", smoke=None),
    "recipe_hf_lm_rope_1500_steps": dict(
        section="recipe", argv=[*RECIPE, "--max_steps", "1500", "--position_embedding_type", "rope"],
        limit=100, reads="train_run", smoke=None),
    "decode": dict(section="decode", argv=[*MEASURE, "decode"], limit=540, reads="measured", smoke=MEASURE_SMOKE),
    "decode_b8": dict(section="decode", argv=[*MEASURE, "decode", "--set", "decode_batches=8"], limit=540,
                      reads="measured", smoke=MEASURE_SMOKE, on_demand=True),
    # the preset (10 epochs at a constant rate) with its budget cut to 420 s of the entry's 520
    "translation": dict(section="translation", argv=[*TRANSLATION, "transformer"], full=["--budget_seconds", "420"],
                        limit=520, reads="translation", smoke=TRANSLATION_SMOKE),
    "translation_budget_linear": dict(
        section="translation", argv=[*TRANSLATION, "transformer", *BUDGET_LINEAR], full=["--budget_seconds", "420"],
        limit=520, reads="translation", smoke=TRANSLATION_SMOKE, on_demand=True),
    "leaderboards": dict(section="leaderboards", argv=CUDA_TESTS, full=["-k", "leaderboards/"], limit=540,
                         reads="check", smoke=[*CHECK_SMOKE, "tools/demo/fp32"]),
    "encoders": dict(section="encoders", argv=[*MEASURE, "encoders"], limit=540, reads="measured",
                     smoke=MEASURE_SMOKE),
    "rnn_lstm": dict(section="rnn_translation", argv=[*TRANSLATION, "rnn", "--cell_type", "lstm"],
                     full=["--budget_seconds", "200"], limit=265, reads="translation", smoke=TRANSLATION_SMOKE),
    "rnn_bahdanau": dict(section="rnn_translation", argv=[*TRANSLATION, "rnn_bahdanau"],
                         full=["--budget_seconds", "200"], limit=265, reads="translation", smoke=TRANSLATION_SMOKE),
}  # fmt: skip
SECTIONS = tuple(dict.fromkeys(e["section"] for e in ENTRIES.values()))

# the sizes of `--measure` (GPT-2 small, BERT-base, T5-small) and of its smoke run; `--set key=value`
SIZES = {
    "full": dict(
        gpt_batch=16, gpt_seq=1024, gpt_layers=12, gpt_hidden=768, gpt_heads=12, gpt_vocab=50257,
        gpt_context=1024, bert_batch=32, bert_seq=512, bert_layers=12, bert_hidden=768, bert_heads=12,
        bert_intermediate=3072, bert_vocab=30522, bert_max_positions=512, bert_pad_fraction=0.0,
        t5_batch=32, t5_source_len=512, t5_target_len=128, t5_layers=6, t5_hidden=512, t5_heads=8,
        t5_intermediate=2048, t5_vocab=32128, decode_batches=[1, 8], prompt_len=32, new_tokens=128,
        decode_dtype="float32", rounds=5, reps=3, warmup=2, decode_rounds=5, peak_sizes=[2048, 4096, 8192],
        peak_repeats=5, peak_min_time=0.25, learning_rate=3e-4,
    ),
    "smoke": dict(
        gpt_batch=2, gpt_seq=32, gpt_layers=2, gpt_hidden=64, gpt_heads=4, gpt_vocab=512, gpt_context=64,
        bert_batch=4, bert_seq=32, bert_layers=2, bert_hidden=64, bert_heads=4, bert_intermediate=128,
        bert_vocab=2000, bert_max_positions=64, bert_pad_fraction=0.5, t5_batch=2, t5_source_len=16,
        t5_target_len=8, t5_layers=2, t5_hidden=64, t5_heads=4, t5_intermediate=128, t5_vocab=1000,
        decode_batches=[1, 8], prompt_len=4, new_tokens=8, decode_dtype="float32", rounds=2, reps=1, warmup=0,
        decode_rounds=2, peak_sizes=[64, 128], peak_repeats=2, peak_min_time=0.02, learning_rate=3e-4,
    ),
}  # fmt: skip

# issue 13's targets: `key` names the measured value (`gpu.targets`), `threshold` the goal
TARGETS = [
    dict(key="eager_vs_nanogpt", text="eager training tokens/s, hf_lm / nanoGPT-shaped", threshold=1.0, unit="x"),
    dict(key="eager_vs_transformers", text="eager training tokens/s, hf_lm / GPT2LMHeadModel", threshold=1.6,
         unit="x"),
    dict(key="compiled_mfu", text="compiled training MFU, hf_lm", threshold=0.40, unit="%"),
    dict(key="static_decode_b1", text="greedy decoding B=1 new tokens/s, hf_lm static cache compiled / "
         "GPT2LMHeadModel dynamic cache (tokens identical to hf_lm's dynamic cache)", threshold=5.0, unit="x"),
    dict(key="static_decode_b1_loop", text="the same with hf_lm's decoding loop (`custom_generate=static_decode`)",
         threshold=5.0, unit="x"),
]  # fmt: skip

# --- the rows of `--measure`, and its README's tables ---
GPT_IMPLS = ("hf_lm", "transformers", "nanogpt")
IMPL_NAMES = {  # the others by their own name
    "hf_lm_sparse": "hf_lm (sparse_prediction=True)",
    "hf_lm_unpadded": "hf_lm, head product not padded (VocabProjection.ALIGN = 1)",
    "nanogpt": "nanoGPT-shaped (benchmarks/gpu.py)",
}
# the decoding rows (implementation/mode); a mode says how it calls generate(): the cache (dynamic or
# static), generate()'s own compilation, hf_lm's loop (`custom_generate=static_decode`), sampling (top-k
# 50, generate()'s default)
DECODE_ROWS = (
    "hf_lm/dynamic hf_lm/static hf_lm/static_compiled hf_lm/static_compiled_loop hf_lm/static_compiled_sample "
    "hf_lm/static_compiled_loop_sample transformers/dynamic transformers/static_compiled"
).split()
SAMPLED = "hf_lm static_compiled_loop_sample == static_compiled_sample"
TRAIN_KEYS = ["hf_lm/eager", "transformers/eager", "nanogpt/eager", "hf_lm_unpadded/eager"]
PLAN = [  # (row id prefix, section, workload, unit, implementation/mode of each row)
    ("gpt2_train", "gpt_train", "GPT-2 training step", "tok/s",
     TRAIN_KEYS + [f"{i}/compiled" for i in GPT_IMPLS]),
    ("gpt2_head_loss", "head_loss", "GPT-2 lm head + cross-entropy fwd+bwd", "s",
     ["hf_lm/eager", "hf_lm_unpadded/eager", "hf_lm/compiled", "transformers/eager"]),
    ("bert_train", "encoders", "BERT masked-LM training step", "pos/s",
     ["hf_lm/eager", "hf_lm_sparse/eager", "transformers/eager"]),
    ("t5_train", "encoders", "T5 training step", "tok/s",
     ["hf_lm/eager", "transformers/eager"]),
]  # fmt: skip
# where a compiled decoding call's host time goes: (file suffix or None, function names) in cProfile
HOST_PARTS = {
    "prepare_inputs_for_generation": (None, ("prepare_inputs_for_generation",)),
    "compiled forward": ("eval_frame.py", ("compile_wrapper", "_fn")),  # torch.compile's wrapper
    "update_model_kwargs": (None, ("_update_model_kwargs_for_generation",)),
    "logits processors": ("logits_process.py", ("__call__",)),
    "stopping criteria": ("stopping_criteria.py", ("__call__",)),
}

TABLES = [  # (title, row id prefixes, columns)
    ("Training steps (forward + backward + AdamW, bf16 autocast)", ("gpt2_train", "bert_train", "t5_train"),
     ["workload", "implementation", "mode", "throughput", "ms", "MFU", "peak GPU MiB", "first call s", "torch.compile", "status"]),
    ("GPT-2 lm head + cross-entropy (forward + backward) against the whole training step", ("gpt2_head_loss",),
     ["implementation", "mode", "ms", "whole step ms", "share of step", "status"]),
    ("Decoding (prefill included): greedy, but the `_sample` rows (top-k 50); same tokens: a greedy static row's "
     "equal the dynamic cache's, the two `_sample` rows' (one seed) each other's", ("gpt2_decode",),
     ["workload", "implementation", "mode", "throughput", "ms", "same tokens", "torch.compile", "first call s", "status"]),
]  # fmt: skip
