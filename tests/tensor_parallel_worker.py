"""One process of a tensor-parallel run (launched by tests/test_tensor_parallel.py with torchrun).

Usage: torchrun --nproc_per_node N tests/tensor_parallel_worker.py OUT FOLDER [FOLDER ...]

Each folder is loaded with `from_pretrained(tp_plan="auto")` (gloo on the CPU), then every process
computes the logits of the inputs saved next to the weights (`inputs.pt`) and greedy `generate()`
tokens; process 0 writes them to OUT as {folder: {"logits", "tokens", "sharded"}}. `sharded` lists
the plan's projections whose weights were really split, so a plan that silently replicates fails.
"""

import os
import sys

import torch
import torch.distributed as dist

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM  # noqa: E402

import hf_lm  # noqa: E402,F401  (registers the Auto classes)


def run(folder: str) -> dict:
    config = AutoConfig.from_pretrained(folder)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    model = auto.from_pretrained(folder, tp_plan="auto", dtype=torch.float32).eval()
    inputs = torch.load(os.path.join(folder, "inputs.pt"))
    with torch.no_grad():
        logits = model(**inputs["forward"]).logits
        tokens = model.generate(**inputs["generate"], max_new_tokens=6, do_sample=False)
    sharded = sorted(
        name
        for name, param in model.named_parameters()
        if hasattr(param, "device_mesh") and param.to_local().shape != param.shape
    )
    return {"logits": logits, "tokens": tokens, "sharded": sharded, "tp_size": model._tp_size}


def main() -> None:
    out, folders = sys.argv[1], sys.argv[2:]
    results = {folder: run(folder) for folder in folders}
    if dist.get_rank() == 0:
        torch.save(results, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
