# Two entry points: `make demo` (the main job) and `make test`. Both create or reuse .venv.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv demo test test-fast lint bench suite gpu-check bench-gpu clean

$(VPY):
	$(PY) -m venv $(VENV)

# torch==2.13.0 is pinned only when no torch is present: an unpinned torch pulls the CUDA build.
$(STAMP): $(VPY) pyproject.toml
	@$(VPY) -c "import torch" 2>/dev/null || $(VPY) -m pip install -q "torch==2.13.0"
	$(VPY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

venv: $(STAMP)

# out/demo is the demo's own folder: a second `make demo` starts it over (the log lists what it deletes)
demo: $(STAMP)
	$(VPY) -m training.demo --output_dir out/demo --overwrite_output_dir

test: $(STAMP)
	$(VPY) -m pytest -q -n 2 --dist loadfile tests

test-fast: $(STAMP)
	$(VPY) -m pytest -q -n 2 --dist loadfile -m "not slow" tests

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(VPY) -m benchmarks.speed --entries gpt2,bert,t5,bart --output_dir out/bench

# every family vs its reference, MFU and torch.compile, in one table (out/suite/README.md)
suite: $(STAMP)
	$(VPY) -m benchmarks.speed --threads 1 --output_dir out/suite

# every part of hf_lm on the CUDA device present: the tests marked `cuda`, with a pass/fail table
# (out/gpu_check/summary.md); without a GPU they are skipped, and it says so and exits 0
gpu-check: $(STAMP)
	$(VPY) -m pytest -m cuda -q tests

# on one GPU, section by section (benchmarks/gpu_entries.py): the cuda checks, GPT-2 small training (hf_lm vs
# GPT2LMHeadModel vs nanoGPT-shaped, eager and compiled, MFU), the Shakespeare recipe, decoding, Multi30k,
# BERT/T5 (out/gpu/README.md); BUDGET_S=900 bounds the run; without CUDA it says so and stops
bench-gpu: $(STAMP)
	$(VPY) -m benchmarks.gpu --output_dir out/gpu $(if $(BUDGET_S),--budget_s $(BUDGET_S))

clean:
	rm -rf $(VENV) out runs .pytest_cache
