"""Push a finished run's `final/` folder to the Hugging Face Hub, after checking it is Hub-ready.

    python -m training.push --folder out/run/final --repo_id user/name --dry-run
    python -m training.push --folder out/run/final --repo_id user/name [--private] [--commit_message ...]

`--dry-run` checks the folder and prints the repo id and the files that would be uploaded with their
sizes, without calling the Hub. Without it the repo is created if needed (`HfApi.create_repo`,
`exist_ok=True`) and the folder uploaded in one commit (`HfApi.upload_folder`); log in first
(`hf auth login` or `HF_TOKEN`).

A folder is Hub-ready when it holds what `AutoModelForCausalLM.from_pretrained(repo_id,
trust_remote_code=True)` and `AutoTokenizer.from_pretrained(repo_id)` need on a machine without
hf_lm, and a model card: `config.json` with an `auto_map`, the `.py` files its `auto_map` names, the
weights (`model.safetensors` or a sharded index), `README.md`, `tokenizer_config.json` and
`tokenizer.json`. Their contents are checked too, without loading a weight (`check_folder`): the
config is a JSON object with a `model_type`, each safetensors header parses and sizes its tensors
to the file, an index's shards all exist and hold exactly the tensors it maps to them,
`tokenizer.json` loads, and every file is named where it is empty, not UTF-8 or not valid JSON.

What is uploaded is an allowlist, never "the folder": the weights (safetensors only), the config and
generation config, the tokenizer's files, the model card, plots (`*.png`) and the model code (the
`hflm_*.py` files and any module the `auto_map` names), top-level files only, and the same files of a
model folder the card points to (ELECTRA's `generator/`). Everything else that sits in the folder
(credentials, keys, optimizer states, RNG states, logs, checkpoints) stays behind and is listed as
left out. A symbolic link that points outside the folder is refused: it would upload
whatever it points to.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

from safetensors import SafetensorError, safe_open
from tokenizers import Tokenizer

WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
REQUIRED = ("README.md", "tokenizer_config.json", "tokenizer.json")
SHARD_PATTERN = "model-[0-9]*-of-[0-9]*.safetensors"  # transformers' shard names, next to their index
# what may be uploaded: file-name patterns of the top level (fnmatch); the model code is added per folder
ALLOWED_PATTERNS = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    SHARD_PATTERN,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "README.md",
    "*.png",
    "hflm_*.py",
)


# model folders of their own inside a checkpoint, which its card tells users to load: each goes
# through the same allowlist (ELECTRA's generator, `fill-mask` from `{repo}/generator`)
MODEL_SUBFOLDERS = ("generator",)


class NotHubReadyError(ValueError):
    """The folder lacks files (or an `auto_map`) that a Hub checkpoint needs."""


def _auto_map_modules(auto_map: dict) -> set[str]:
    """The module files named by an `auto_map` ("module.Class", or lists of them for tokenizers)."""
    modules = set()
    for refs in auto_map.values():
        for ref in refs if isinstance(refs, (list, tuple)) else [refs]:
            if ref and "--" not in ref:  # "other/repo--module.Class" lives in another repo
                modules.add(ref.rsplit(".", 1)[0] + ".py")
    return modules


def _escapes(path: Path, folder: Path) -> bool:
    """Whether `path` is a symbolic link (or under one) whose target lies outside `folder`."""
    return not path.resolve().is_relative_to(folder.resolve())


def select_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """Split the folder's files into those the allowlist uploads and those it leaves out.

    Returns:
        `(uploaded, left_out)`, each sorted. `left_out` holds every other file and folder entry,
        at any depth (a `checkpoints/` folder is one entry).

    Raises:
        NotHubReadyError: an allowed name is a symbolic link pointing outside the folder.
    """
    allowed = set(ALLOWED_PATTERNS)
    config = folder / "config.json"
    if config.is_file() and not _escapes(config, folder):
        value, problem = _read_json(config, folder)
        auto_map = value.get("auto_map") if problem is None else None
        if isinstance(auto_map, dict):  # a broken config is check_folder's to report
            allowed |= _auto_map_modules(auto_map)
    uploaded, left_out, escaping = [], [], []
    for path in sorted(folder.iterdir()):
        if path.name in MODEL_SUBFOLDERS and path.is_dir() and not path.is_symlink():
            inner_uploaded, inner_left_out = select_files(path)
            uploaded += inner_uploaded
            left_out += inner_left_out
        elif not any(fnmatch.fnmatchcase(path.name, pattern) for pattern in allowed) or not path.is_file():
            left_out.append(path)
        elif _escapes(path, folder):
            escaping.append(path)
        else:
            uploaded.append(path)
    if escaping:
        raise NotHubReadyError(
            "Refusing to upload symbolic links that point outside the folder (their targets would be uploaded):\n"
            + "\n".join(f"  - {p.name} -> {p.resolve()}" for p in escaping)
        )
    return sorted(uploaded), sorted(left_out)


def upload_files(folder: Path) -> list[Path]:
    """The files a push sends: the allowlisted top-level files of `folder` (and of its model
    subfolders), sorted."""
    return select_files(Path(folder))[0]


def _name(path: Path, root: Path) -> str:
    """`path` as the upload names it: relative to the pushed folder."""
    return path.relative_to(root).as_posix()


def _read_text(path: Path, root: Path) -> tuple[str | None, str | None]:
    """`(text, None)`, or `(None, problem)` for a file that is empty or not UTF-8."""
    data = path.read_bytes()
    if not data:
        return None, f"{_name(path, root)} is empty (0 bytes)."
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        return None, f"{_name(path, root)}, line {line} (byte {err.start}): not UTF-8 ({err.reason})."


def _read_json(path: Path, root: Path) -> tuple[dict | None, str | None]:
    """`(object, None)`, or `(None, problem)` for a file that is not UTF-8 JSON holding an object."""
    text, problem = _read_text(path, root)
    if problem is not None:
        return None, problem
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"{_name(path, root)}, line {err.lineno} column {err.colno}: not valid JSON ({err.msg})."
    if not isinstance(value, dict):
        return None, f"{_name(path, root)} must hold a JSON object ({{...}}), got a {type(value).__name__}."
    return value, None


def _safetensors_tensors(path: Path, root: Path) -> tuple[set[str] | None, str | None]:
    """The tensor names of a safetensors file, read from its header alone (no weight is loaded),
    or a problem. `safe_open` checks that the header parses and that the tensors' byte ranges,
    as their dtypes and shapes size them, cover the file's data exactly."""
    if path.stat().st_size == 0:
        return None, f"{_name(path, root)} is empty (0 bytes)."
    try:
        with safe_open(str(path), framework="numpy") as f:
            names = set(f.keys())
    except (SafetensorError, OSError) as err:
        return None, f"{_name(path, root)} is not a valid safetensors file: {err}."
    if not names:
        return None, f"{_name(path, root)} holds no tensors."
    return names, None


def _some(names: set[str]) -> str:
    """Up to three of `names`, and how many more."""
    shown = ", ".join(sorted(names)[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _config_problems(folder: Path, root: Path) -> list[str]:
    """config.json: a JSON object with a model_type, an auto_map, and the code its auto_map names."""
    config = folder / "config.json"
    if not config.is_file():
        return [f"{_name(config, root)} is missing."]
    value, problem = _read_json(config, root)
    if problem is not None:
        return [problem]
    problems = []
    if not isinstance(value.get("model_type"), str) or not value["model_type"]:
        problems.append(
            f"{_name(config, root)} has no model_type: transformers cannot tell which model it is."
        )
    auto_map = value.get("auto_map")
    if not auto_map:
        problems.append(
            f"{_name(config, root)} has no auto_map: the model would not load with trust_remote_code=True."
        )
    elif not isinstance(auto_map, dict):
        problems.append(
            f"{_name(config, root)}: auto_map must be an object, got a {type(auto_map).__name__}."
        )
    else:
        for module in sorted(_auto_map_modules(auto_map)):
            if not (folder / module).is_file():
                problems.append(
                    f"{_name(folder / module, root)} (model code named by config.json's auto_map) is missing."
                )
    return problems


def _weights_problems(folder: Path, root: Path) -> list[str]:
    """The weights: `model.safetensors`, or an index whose shards all exist, parse, and hold
    exactly the tensors the index maps to them, and no shard file the index does not name."""
    single, index = folder / WEIGHTS[0], folder / WEIGHTS[1]
    shards_here = {
        p.name for p in folder.iterdir() if fnmatch.fnmatchcase(p.name, SHARD_PATTERN) and p.is_file()
    }
    if single.is_file() and index.is_file():
        return [
            f"both {_name(single, root)} and {_name(index, root)}: transformers loads the first, the index is stale; keep one."
        ]
    if single.is_file():
        stale = [
            f"{_name(folder / name, root)} is a shard no index names (a stale file?)."
            for name in sorted(shards_here)
        ]
        return stale + [problem for problem in [_safetensors_tensors(single, root)[1]] if problem]
    if not index.is_file():
        return [f"the weights are missing: expected {_name(single, root)} or {_name(index, root)}."]
    value, problem = _read_json(index, root)
    if problem is not None:
        return [problem]
    weight_map = value.get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(v, str) for v in weight_map.values())
    ):
        return [f"{_name(index, root)} has no weight_map (tensor name -> shard file)."]
    problems = []
    expected: dict[str, set[str]] = {}
    for tensor, shard in weight_map.items():
        expected.setdefault(shard, set()).add(tensor)
    for shard, tensors in sorted(expected.items()):
        path = folder / shard
        if "/" in shard or "\\" in shard or not fnmatch.fnmatchcase(shard, SHARD_PATTERN):
            problems.append(
                f"{_name(index, root)} names the shard {shard!r}, which the upload does not send "
                "(shards are model-NNNNN-of-NNNNN.safetensors files next to the index)."
            )
            continue
        if not path.is_file():
            problems.append(f"{_name(path, root)} (a shard named by {index.name}) is missing.")
            continue
        found, problem = _safetensors_tensors(path, root)
        if problem is not None:
            problems.append(problem)
            continue
        if tensors - found:
            problems.append(
                f"{_name(path, root)} lacks {_some(tensors - found)}, which {index.name} maps to it."
            )
        if found - tensors:
            problems.append(
                f"{_name(path, root)} holds {_some(found - tensors)}, which {index.name} does not map to it."
            )
    problems.extend(
        f"{_name(folder / name, root)} is a shard {index.name} does not name (a stale file?)."
        for name in sorted(shards_here - set(expected))
    )
    return problems


def _file_problem(path: Path, root: Path) -> str | None:
    """What is wrong with one uploaded file's contents, by its kind (the weights are checked as a
    whole, `_weights_problems`)."""
    name = path.name
    if name.endswith(".safetensors") or name in ("config.json", WEIGHTS[1]) or name.endswith(".png"):
        return None  # checked with their folder, or images
    if name == "tokenizer.json":
        value, problem = _read_json(path, root)
        if problem is not None:
            return problem
        try:
            Tokenizer.from_str(json.dumps(value))
        except Exception as err:  # tokenizers raises its own Exception for any malformed part
            return f"{_name(path, root)} does not load with the tokenizers library: {err}."
        return None
    if name.endswith(".json"):
        return _read_json(path, root)[1]
    if name.endswith(".py"):
        text, problem = _read_text(path, root)
        if problem is not None:
            return problem
        try:
            compile(text, _name(path, root), "exec")
        except SyntaxError as err:
            return f"{_name(path, root)}, line {err.lineno}: not valid Python ({err.msg})."
        return None
    if name in ("README.md", "vocab.txt", "merges.txt", "chat_template.jinja"):
        return _read_text(path, root)[1]
    if path.stat().st_size == 0:  # spiece.model and other binary files
        return f"{_name(path, root)} is empty (0 bytes)."
    return None


def check_folder(folder) -> list[Path]:
    """Check that `folder` is a Hub-ready hf_lm checkpoint, reading what would be uploaded.

    Checked without loading a weight: `config.json` is a JSON object with a `model_type` and an
    `auto_map` whose code files exist; the weights are `model.safetensors` or an index whose shards
    all exist and hold exactly the tensors it maps to them, each safetensors header parsing and
    sizing its tensors to the file; `tokenizer.json` loads with `tokenizers`; every other JSON file
    holds an object, every text file is UTF-8 and not empty, the model code compiles. The same
    goes for a model subfolder the upload sends (ELECTRA's `generator/`).

    Args:
        folder: the checkpoint folder (a run's `output_dir/final`).

    Returns:
        The files that would be uploaded, sorted.

    Raises:
        NotHubReadyError: every problem found, one per line, naming the file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise NotHubReadyError(f"{folder} is not a folder.")
    files = upload_files(folder)
    models = [folder] + [
        folder / name
        for name in MODEL_SUBFOLDERS
        if (folder / name).is_dir() and not (folder / name).is_symlink()
    ]
    problems = []
    for model_folder in models:
        problems += _config_problems(model_folder, folder)
        problems += _weights_problems(model_folder, folder)
        problems += [
            f"{_name(model_folder / name, folder)} is missing."
            for name in REQUIRED
            if model_folder == folder and not (model_folder / name).is_file()
        ]
    problems += [problem for path in files if (problem := _file_problem(path, folder)) is not None]
    if problems:
        raise NotHubReadyError(f"{folder} is not Hub-ready:\n" + "\n".join(f"  - {p}" for p in problems))
    return files


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def push(folder, repo_id: str, *, private: bool = False, commit_message: str | None = None) -> str:
    """Create `repo_id` on the Hub if needed and upload the checked `folder`; returns the commit URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    check_folder(folder)
    api = HfApi()
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    # one operation per allowlisted file: nothing else in the folder can reach the Hub
    operations = [
        CommitOperationAdd(path_in_repo=path.relative_to(folder).as_posix(), path_or_fileobj=str(path))
        for path in upload_files(folder)
    ]
    commit = api.create_commit(
        repo_id=repo_id,
        repo_type="model",
        operations=operations,
        commit_message=commit_message or "Upload hf_lm model",
    )
    return commit.commit_url


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1 when the folder is not Hub-ready)."""
    parser = argparse.ArgumentParser(prog="python -m training.push", description=__doc__.split("\n")[0])
    parser.add_argument("--folder", required=True, help="The checkpoint folder, e.g. out/run/final.")
    parser.add_argument("--repo_id", required=True, help="The Hub repo, 'user/name' or 'org/name'.")
    parser.add_argument("--private", action="store_true", help="Create the repo private.")
    parser.add_argument(
        "--dry-run", "--dry_run", dest="dry_run", action="store_true", help="Check and list; upload nothing."
    )
    parser.add_argument("--commit_message", default=None, help="The commit message of the upload.")
    args = parser.parse_args(argv)
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:  # the Hub's rules, offline: a dry run must not approve a name the upload would be refused
        validate_repo_id(args.repo_id)
    except HFValidationError as err:
        parser.error(f"--repo_id {args.repo_id!r}: {err}")

    folder = Path(args.folder)
    try:
        files = check_folder(folder)
        left_out = select_files(folder)[1]
    except NotHubReadyError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if left_out:
        print(
            "Left out (not on the upload allowlist): "
            + ", ".join(p.relative_to(folder).as_posix() + ("/" if p.is_dir() else "") for p in left_out),
            file=sys.stderr,
        )
    if args.dry_run:
        sizes = [path.stat().st_size for path in files]
        print(f"Would upload {len(files)} files ({_size(sum(sizes))}) to {args.repo_id}:")
        for path, size in zip(files, sizes):
            print(f"  {path.relative_to(folder).as_posix():<40} {_size(size):>10}")
        return 0
    url = push(folder, args.repo_id, private=args.private, commit_message=args.commit_message)
    print(f"Pushed {len(files)} files to {args.repo_id}: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
