"""The remote-code harness: load saved folders with `trust_remote_code=True` in a fresh interpreter
where `hf_lm` cannot be imported, and check that they reproduce what the in-process models gave.

When `hf_lm` is imported and registered in the same process, the local classes win even with
`trust_remote_code=True`, so remote loading is only tested for real in a
fresh interpreter with `sys.modules["hf_lm"] = None`, run from a folder where nothing shadows the
shipped files. One interpreter checks any number of folders (its start-up, importing torch and
transformers, is most of its cost):

    remote = RemoteCode(tmp_path)
    folder = remote.save(model, "lm")                                   # save_pretrained into tmp_path/lm
    remote.expect(folder, "AutoModelForCausalLM", model, {"input_ids": x})  # every output tensor
    remote.expect(folder, "AutoModelForCausalLM", model, {"input_ids": x}, generate={"max_new_tokens": 5})
    remote.run()  # one subprocess; fails listing every check whose output differs

Outputs must agree to 1e-6 (token ids exactly): the expectations are computed without autograd on one
thread, and the fresh interpreter does the same (the fused recurrent CPU kernels differ by ~1e-9 with
autograd on). Not bitwise: a reloaded weight's memory alignment may change a CPU kernel's summation order.
Scripts with other checks (pipelines on saved folders) use `run_fresh_interpreter` directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from safetensors.torch import save_file

# the modules shipped code may import: torch, transformers, the standard library and its siblings ("")
ALLOWED_IMPORTS = {"torch", "transformers", ""} | set(sys.stdlib_module_names)


def run_fresh_interpreter(script: str, *args: str, cwd: Path) -> str:
    """Run `script` (Python source) in a fresh interpreter in `cwd`, offline, with its own modules cache.

    Returns its stdout; fails the test with the end of its stderr when it exits non-zero.
    """
    cwd = Path(cwd)
    path = cwd / "remote_script.py"
    path.write_text(textwrap.dedent(script))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["HF_MODULES_CACHE"] = str(cwd / "modules")  # not shared between test workers
    env.pop("PYTHONPATH", None)  # nothing but the saved folders may provide hf_lm's code
    # run from cwd, not the repository, so nothing local shadows the shipped files
    result = subprocess.run(
        [sys.executable, str(path), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def shipped_files(folder: Path) -> set[str]:
    """The Python files `save_pretrained` copied next to the weights."""
    return {p.name for p in Path(folder).glob("*.py")}


def assert_shipped_code_imports_only_torch_and_transformers(folder: Path) -> None:
    """Shipped code imports torch, transformers, the standard library and its siblings only (not hf_lm)."""
    for name in shipped_files(folder):
        for line in (Path(folder) / name).read_text().splitlines():
            if line.startswith(("import ", "from ")):
                assert line.split()[1].split(".")[0] in ALLOWED_IMPORTS, f"{name}: {line}"


def _tensors(output) -> dict[str, torch.Tensor]:
    """The tensor fields of a model output (caches and tuples of per-layer states left out), or the
    tensor itself (generate()'s sequences) under the name "sequences"."""
    if torch.is_tensor(output):
        return {"sequences": output}
    return {key: value for key, value in output.items() if torch.is_tensor(value)}


REMOTE_SCRIPT = """
    import json
    import sys

    sys.modules["hf_lm"] = None  # hf_lm must not be importable: everything comes from the folders
    import torch

    torch.set_num_threads(1)  # as in the test process, so reductions run in the same order
    torch.set_grad_enabled(False)  # as the expectations were made
    import transformers
    from safetensors.torch import load_file

    checks = json.load(open(sys.argv[1]))
    tensors = load_file(sys.argv[2])
    models, failures = {}, []
    for i, check in enumerate(checks):
        key = (check["folder"], check["auto_class"])
        if key not in models:
            auto = getattr(transformers, check["auto_class"])
            models[key] = auto.from_pretrained(check["folder"], trust_remote_code=True).eval()
            config = transformers.AutoConfig.from_pretrained(check["folder"], trust_remote_code=True)
            assert config.model_type == check["model_type"], (config.model_type, check)
        model = models[key]
        where = f"{check['folder']} {check['auto_class']} {type(model).__module__}.{type(model).__name__}"
        if not type(model).__module__.startswith("transformers_modules"):
            failures.append(f"{where}: not loaded from the folder's code")
            continue
        inputs = {name: tensors[f"{i}.in.{name}"] for name in check["inputs"]}
        if check["generate"] is None:
            output = model(**inputs)
        else:
            output = {"sequences": model.generate(**inputs, **check["generate"])}
        for name in check["outputs"]:
            got, want = output[name], tensors[f"{i}.out.{name}"]
            if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-6, atol=1e-6):
                failures.append(f"{where} {name}: {got.shape} vs {want.shape}, {got.flatten()[:6]} vs {want.flatten()[:6]}")
    print("\\n".join(failures))
    print(f"REMOTE-OK {len(checks) - len(failures)}/{len(checks)}")
    sys.exit(1 if failures else 0)
"""


class RemoteCode:
    """Collects expectations for saved folders, then checks them all in one fresh interpreter."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.checks: list[dict] = []
        self.tensors: dict[str, torch.Tensor] = {}

    def save(self, model, name: str) -> Path:
        """`model.save_pretrained(root / name)`; returns the folder."""
        folder = self.root / name
        model.save_pretrained(folder)
        return folder

    @torch.no_grad()
    def expect(self, folder: Path, auto_class: str, model, inputs: dict, *, generate: dict | None = None):
        """The folder loaded with `transformers.<auto_class>` must give what `model` gives on `inputs`:
        every tensor of `model(**inputs)`, or `model.generate(**inputs, **generate)`'s sequences."""
        model.eval()
        output = model(**inputs) if generate is None else model.generate(**inputs, **generate)
        index = len(self.checks)
        outputs = _tensors(output)
        for name, value in inputs.items():
            self.tensors[f"{index}.in.{name}"] = value.clone()  # inputs may share memory
        for name, value in outputs.items():
            self.tensors[f"{index}.out.{name}"] = value.clone()
        self.checks.append(
            {
                "folder": str(folder),
                "auto_class": auto_class,
                "model_type": model.config.model_type,
                "inputs": sorted(inputs),
                "outputs": sorted(outputs),
                "generate": generate,
            }
        )

    def run(self) -> None:
        """Check every expectation in one fresh interpreter; fails listing each output that differs."""
        assert self.checks, "no expectations to check"
        (self.root / "checks.json").write_text(json.dumps(self.checks))
        save_file(self.tensors, str(self.root / "expected.safetensors"))
        stdout = run_fresh_interpreter(
            REMOTE_SCRIPT, self.root / "checks.json", self.root / "expected.safetensors", cwd=self.root
        )
        assert f"REMOTE-OK {len(self.checks)}/{len(self.checks)}" in stdout, stdout
