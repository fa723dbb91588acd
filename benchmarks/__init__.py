"""The benchmarks and leaderboards of hf_lm, run from the repository root as modules:

    python -m benchmarks.speed --smoke
    python -m benchmarks.speed --entries gpt2,llama

`speed` is the speed runner (its entries in `speed_entries`, `speed_workloads` and `speed_fsdp`),
`measure` holds what the benchmarks measure with (machine, timing, memory, FLOPs, command lines),
`render` writes every results README from its results.json. This package is not installed: like
`training`, it is found because Python puts the working directory on `sys.path` under `-m`.

Every benchmark runs offline, and tokenizers' own threads stay off (they would compete with the
timed torch threads); set here, before any script imports transformers.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
