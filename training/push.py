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
`tokenizer.json`.

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

WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
REQUIRED = ("README.md", "tokenizer_config.json", "tokenizer.json")
# what may be uploaded: file-name patterns of the top level (fnmatch); the model code is added per folder
ALLOWED_PATTERNS = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-[0-9]*-of-[0-9]*.safetensors",
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
        try:
            allowed |= _auto_map_modules(json.loads(config.read_text(encoding="utf-8")).get("auto_map") or {})
        except json.JSONDecodeError:
            pass  # check_folder reports the broken config
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


def check_folder(folder) -> list[Path]:
    """Check that `folder` is a Hub-ready hf_lm checkpoint.

    Args:
        folder: the checkpoint folder (a run's `output_dir/final`).

    Returns:
        The files that would be uploaded, sorted.

    Raises:
        NotHubReadyError: every problem found, one per line.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise NotHubReadyError(f"{folder} is not a folder.")
    problems = []
    config = folder / "config.json"
    if not config.is_file():
        problems.append("config.json is missing.")
    else:
        auto_map = json.loads(config.read_text(encoding="utf-8")).get("auto_map")
        if not auto_map:
            problems.append(
                "config.json has no auto_map: the model would not load with trust_remote_code=True."
            )
        else:
            for module in sorted(_auto_map_modules(auto_map)):
                if not (folder / module).is_file():
                    problems.append(f"{module} (model code named by config.json's auto_map) is missing.")
    if not any((folder / name).is_file() for name in WEIGHTS):
        problems.append(f"the weights are missing: expected {' or '.join(WEIGHTS)}.")
    problems.extend(f"{name} is missing." for name in REQUIRED if not (folder / name).is_file())
    if problems:
        raise NotHubReadyError(f"{folder} is not Hub-ready:\n" + "\n".join(f"  - {p}" for p in problems))
    return upload_files(folder)


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
