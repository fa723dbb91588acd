"""The benchmarks and leaderboards of hf_lm, run from the repository root as modules:

    python -m benchmarks.bench_gpt --quick
    python -m benchmarks.suite --smoke

`bench_common` holds what they share (machine, timing, memory, command lines, tables, the
leaderboards' common steps); `pairs` builds the hf_lm/transformers model pairs they measure;
`peak_flops` counts FLOPs and probes the machine's peak. This package is not installed: like
`training`, it is found because Python puts the working directory on `sys.path` under `-m`.

Every benchmark runs offline, and tokenizers' own threads stay off (they would compete with the
timed torch threads); set here, before any script imports transformers.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
