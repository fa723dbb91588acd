"""What a hostile or careless user does to a run's data, arguments and tokenizer (issue 33).

Each case was once accepted with a wrong result or a raw error: a checkpoint continued on a freshly
trained tokenizer (`--init_from`), unseen characters read as the end-of-document token, a resume on
a corpus replaced at the same path, one-token blocks reported as a divergence, `1e-3` in a YAML
file read as a string, and data files that are no files (a fake `.gz`, a FIFO, a link loop).
"""

import gzip
import json
import logging
import os
import threading
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from conftest import tiny_gpt_config
from test_faults import _killed, _run, _same_weights, kill_at_call, run_in_child

import training.train as T
from hf_lm import HfLmGPTForCausalLM
from training.args import as_flags, parse_args
from training.args.checks import check_arguments
from training.data.batches import BatchPlan
from training.data.fingerprint import source_fingerprint
from training.data.loading import load_text_dataset
from training.data.local_files import DataFileError
from training.data.prepare import TrainingBlocks, check_unknown_share, prepare_data
from training.data.tokenizer import (
    BERT_SPECIAL_TOKENS,
    T5_SPECIAL_TOKENS,
    UNK_TOKEN,
    train_tokenizer,
    unk_shared_role,
)
from training.objectives import objective_for
from training.state.resume import check_resumable, data_changes

TEXT = (
    "The king sat on the throne and the queen sat by him.\n\nThe court watched over the land, "
    "and the land was quiet.\n\n"
) * 12


def _corpus(tmp_path, text=TEXT, name="corpus.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _args(tmp_path, **flags):
    values = {
        "dataset": str(_corpus(tmp_path)),
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        **flags,
    }
    return parse_args(as_flags(values))


# ---------------------------------------------------------------------------------------------
# --init_from uses the checkpoint's own tokenizer
# ---------------------------------------------------------------------------------------------


def _base_checkpoint(folder: Path) -> tuple[Path, object]:
    """A GPT saved with the tokenizer its ids come from, as a run's final/ holds them."""
    tokenizer = train_tokenizer([TEXT], kind="byte_bpe", vocab_size=300, model_max_length=32)
    config = tiny_gpt_config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        max_position_embeddings=32,
    )
    HfLmGPTForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, tokenizer


def test_init_from_continues_on_the_checkpoints_tokenizer(tmp_path, caplog):
    """`--init_from base --dataset new.txt --vocab_size 280` trained a new tokenizer: every merged
    token changed id under the checkpoint's weights. The checkpoint's own is used, and the tokenizer
    flags are reported as ignored."""
    base, base_tokenizer = _base_checkpoint(tmp_path / "base")
    other = "Quartz zebras jump over seven lazy foxes; wizards box quickly.\n\n" * 30
    new = _corpus(tmp_path, other, "new.txt")
    out = tmp_path / "continued"
    argv = as_flags(
        {
            "dataset": str(new),
            "init_from": str(base),
            "vocab_size": 280,
            "block_size": 16,
            "max_steps": 1,
            "per_device_batch_size": 2,
            "eval_every": 1,
            "save_every": 1,
            "output_dir": str(out),
            "report_to": "none",
        }
    )
    with caplog.at_level(logging.WARNING, logger="training.args.checks"):
        T.main(argv)
    assert "Ignored: --vocab_size 280" in caplog.text and "init_from" in caplog.text
    # the config flags too: the checkpoint's config is the model's (they were ignored without a word)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="training.args.checks"):
        check_arguments(
            *_args(tmp_path, init_from=str(base), block_size=16, hidden_size=64, num_hidden_layers=4)
        )
    assert (
        "Ignored: --num_hidden_layers 4, --hidden_size 64 (the model's config comes from the `init_from`"
        in caplog.text
    )
    assert not (out / "tokenizer").exists()  # none trained
    from transformers import AutoTokenizer

    shipped = AutoTokenizer.from_pretrained(out / "final")
    assert shipped.get_vocab() == base_tokenizer.get_vocab()
    assert shipped(other)["input_ids"] == base_tokenizer(other)["input_ids"]


def test_a_resumed_init_from_run_keeps_the_tokenizer_it_trained(tmp_path, caplog):
    """A run started with --init_from before this fix trained its own tokenizer/: its checkpoints hold
    that tokenizer's ids, so resuming it goes on with it, not with the checkpoint's."""
    base, base_tokenizer = _base_checkpoint(tmp_path / "base")
    own = train_tokenizer([TEXT.upper()], kind="byte_bpe", vocab_size=290, model_max_length=16)
    own.save_pretrained(tmp_path / "out" / "tokenizer")
    data_args, _, train_args = _args(tmp_path, init_from=str(base), block_size=16, resume="auto")
    with caplog.at_level(logging.WARNING, logger="training.data.prepare"):
        tokenizer = prepare_data(data_args, train_args, Accelerator(cpu=True), init_from=str(base))[0]
    assert tokenizer.get_vocab() == own.get_vocab() != base_tokenizer.get_vocab()
    assert "holds the tokenizer this run trained" in caplog.text
    # a plain resume (no --init_from) reloads its tokenizer/ without that warning: every one said it
    caplog.clear()
    data_args, _, train_args = _args(tmp_path, block_size=16, resume="auto")
    with caplog.at_level(logging.WARNING, logger="training.data.prepare"):
        assert prepare_data(data_args, train_args, Accelerator(cpu=True))[0].get_vocab() == own.get_vocab()
    assert "init_from" not in caplog.text
    # a run that does not resume reads with the checkpoint's
    data_args, _, train_args = _args(tmp_path, init_from=str(base), block_size=16)
    tokenizer = prepare_data(data_args, train_args, Accelerator(cpu=True), init_from=str(base))[0]
    assert tokenizer.get_vocab() == base_tokenizer.get_vocab()


def test_init_from_without_a_tokenizer_is_refused_by_name(tmp_path):
    base = tmp_path / "weights_only"
    HfLmGPTForCausalLM(tiny_gpt_config(max_position_embeddings=32)).save_pretrained(base)
    with pytest.raises(ValueError, match=r"--init_from .*holds no tokenizer.*--tokenizer_name_or_path"):
        check_arguments(*_args(tmp_path, init_from=str(base), block_size=16))
    # a run's folder, not its final/: "holds no tokenizer", then with one given transformers'
    # "Should have a `model_type` key in its config.json" after the data
    run = tmp_path / "run"
    HfLmGPTForCausalLM(tiny_gpt_config(max_position_embeddings=32)).save_pretrained(run / "final")
    tokenizer = str(run / "tokenizer")
    for flags in ({}, {"tokenizer_name_or_path": tokenizer}):
        with pytest.raises(
            ValueError, match=r"--init_from .* without a config.json.*the run's model is .*final"
        ):
            check_arguments(*_args(tmp_path, init_from=str(run), block_size=16, **flags))


def test_init_from_with_a_larger_given_tokenizer_grows_the_embeddings(tmp_path):
    """As transformers' run_clm.py: a given tokenizer with more tokens resizes the checkpoint's rows."""
    base = tmp_path / "base"
    HfLmGPTForCausalLM(tiny_gpt_config(vocab_size=260, max_position_embeddings=32)).save_pretrained(base)
    tokenizer = train_tokenizer([TEXT], kind="byte_bpe", vocab_size=300)
    data_args, model_args, train_args = _args(tmp_path, init_from=str(base), block_size=16)
    model = objective_for(train_args).build_model("gpt", model_args, data_args, tokenizer)
    assert model.get_input_embeddings().num_embeddings == len(tokenizer) > 260


# ---------------------------------------------------------------------------------------------
# unseen text has an unknown token of its own
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["char", "unigram", "wordpiece"])
def test_unseen_characters_are_unknown_not_end_of_text(kind):
    """With GPT's special tokens unk was `<|endoftext|>`: "the queen\\tsat" decoded to 'the eensat'."""
    tokenizer = train_tokenizer([TEXT.lower()], kind=kind, vocab_size=60, min_frequency=1)
    ids = tokenizer("the queen\tsat")["input_ids"]
    assert tokenizer.unk_token == UNK_TOKEN and tokenizer.unk_token_id != tokenizer.eos_token_id
    assert tokenizer.eos_token_id not in ids
    if kind != "wordpiece":  # WordPiece splits at the tab, which is whitespace to it
        assert tokenizer.unk_token_id in ids
        assert tokenizer.decode(ids) == f"the queen{UNK_TOKEN}sat"
    assert unk_shared_role(tokenizer) is None
    # the other families' tokenizers keep their own unk
    for special in (BERT_SPECIAL_TOKENS, T5_SPECIAL_TOKENS):
        assert (
            train_tokenizer([TEXT], kind=kind, vocab_size=60, special_tokens=special).unk_token
            == (special["unk_token"])
        )


def test_byte_bpe_keeps_gpt2s_ids():
    tokenizer = train_tokenizer([TEXT], kind="byte_bpe", vocab_size=300)
    assert tokenizer.unk_token == tokenizer.eos_token == "<|endoftext|>"  # it never emits unk
    assert tokenizer.convert_tokens_to_ids(["<|pad|>", "<|im_start|>", "<|im_end|>"]) == [1, 2, 3]


def test_a_tokenizer_saved_before_the_fix_loads_and_is_named(tmp_path, caplog):
    """A char tokenizer whose unk is `<|endoftext|>` (as they were saved) still loads and runs; a run
    that reads with it says so."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, "<|pad|>": 1, **{c: i + 2 for i, c in enumerate(sorted(set(TEXT)))}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    old = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|pad|>",
    )
    old.save_pretrained(tmp_path / "old")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "old")
    assert loaded("The king")["input_ids"] == old("The king")["input_ids"]
    assert unk_shared_role(loaded) == "eos_token"
    data_args = _args(tmp_path)[0]
    with caplog.at_level(logging.WARNING, logger="training.data.prepare"):
        assert check_unknown_share(loaded, torch.tensor([[2, 3]]), data_args, str(tmp_path / "old")) is None
    assert "its eos_token" in caplog.text and "Retrain" in caplog.text


def test_a_vocabulary_without_room_is_refused_before_the_data(tmp_path):
    """`--tokenizer_kind char --vocab_size 3` trained on 83% EOS: three special tokens leave no room."""
    with pytest.raises(ValueError, match=r"--vocab_size 3 cannot hold a char tokenizer.*--vocab_size 4"):
        check_arguments(*_args(tmp_path, tokenizer_kind="char", vocab_size=3))


def test_mostly_unknown_tokens_are_refused_and_leave_no_tokenizer(tmp_path):
    data_args, _, train_args = _args(tmp_path, tokenizer_kind="char", vocab_size=4, block_size=8)
    with pytest.raises(ValueError, match=r"mostly unknown tokens: \d+\.\d% .*raise --vocab_size \(now 4\)"):
        prepare_data(data_args, train_args, Accelerator(cpu=True))
    assert not (tmp_path / "out" / "tokenizer").exists()  # a rerun with a larger vocabulary is not blocked


def test_some_unknown_tokens_are_reported(tmp_path, caplog):
    tokenizer = train_tokenizer(["abc abc"], kind="char", vocab_size=10, min_frequency=1)
    unk = tokenizer.unk_token_id
    ids = torch.tensor([[unk] * 5 + [tokenizer.convert_tokens_to_ids("a")] * 95])  # 5% unknown
    data_args = _args(tmp_path)[0]
    with caplog.at_level(logging.WARNING, logger="training.data.prepare"):
        assert check_unknown_share(tokenizer, ids, data_args, None) == pytest.approx(0.05)
    assert "5.0% of the training tokens are the unknown token '<|unk|>'" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="training.data.prepare"):
        check_unknown_share(tokenizer, ids[:, 5:], data_args, None)
    assert caplog.text == ""


# ---------------------------------------------------------------------------------------------
# a resume refuses a corpus changed at the same path
# ---------------------------------------------------------------------------------------------


def test_a_file_rewritten_with_the_same_size_and_times_is_told_apart(tmp_path):
    path = _corpus(tmp_path)
    before = source_fingerprint(str(path))
    stat = path.stat()
    path.write_text(TEXT.replace("king", "kong"))  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old times
    now = source_fingerprint(str(path))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    change = data_changes({"dataset": before}, {"dataset": now})
    assert change == f"--dataset: {path} (its contents changed)"
    assert data_changes({"dataset": before}, {"dataset": before}) is None
    # a folder: the files added and removed are named too
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text(TEXT)
    first = source_fingerprint(str(folder))
    (folder / "a.txt").unlink()
    (folder / "b.txt").write_text(TEXT)
    assert data_changes({"dataset": first}, {"dataset": source_fingerprint(str(folder))}) == (
        f"--dataset: {folder / 'a.txt'} (removed), {folder / 'b.txt'} (new)"
    )


def _state(tmp_path, data_args, train_args, fingerprint=None, **data_state):
    order = {"global_batch_size": train_args.per_device_batch_size, "seed": train_args.seed}
    if fingerprint is not None:
        order["data_fingerprint"] = fingerprint
    return {"step": 1, "path": tmp_path / "checkpoint-1", "extra": {}, "data_state": order | data_state}


def test_check_resumable_compares_the_data_fingerprint(tmp_path, caplog):
    data_args, _, train_args = _args(tmp_path)
    fingerprint = {"dataset": source_fingerprint(data_args.dataset)}
    blocks = TrainingBlocks({"input_ids": torch.zeros(1, 2, dtype=torch.long)}, fingerprint)
    batch = BatchPlan.from_args(data_args, train_args, world=1, rank=0)  # a global batch of per_device
    check_resumable(
        _state(tmp_path, data_args, train_args, fingerprint), data_args, train_args, batch, blocks
    )
    changed = {"dataset": {"files": {data_args.dataset: "0" * 64}}}
    with pytest.raises(ValueError, match=r"training data changed .*corpus.txt \(its contents changed\)"):
        check_resumable(
            _state(tmp_path, data_args, train_args, changed), data_args, train_args, batch, blocks
        )
    # a checkpoint from before fingerprints: resumed, with a warning
    with caplog.at_level(logging.WARNING, logger="training.state.resume"):
        check_resumable(_state(tmp_path, data_args, train_args), data_args, train_args, batch, blocks)
    assert "records no fingerprint of its data" in caplog.text


@pytest.mark.slow
def test_a_run_killed_then_resumed_on_a_changed_corpus_is_refused(tmp_path):
    """The fault-injection case: a run is killed mid-step; its corpus file is edited in place (same
    size, old times); `--resume` is refused naming the file; the file put back, it resumes and ends
    with the weights of an uninterrupted run, bit for bit."""
    corpus = _corpus(tmp_path)
    flags = {"dataset": str(corpus), "max_documents": None, "max_steps": 6, "keep_last": None}
    reference = tmp_path / "reference"
    _run(reference, **flags)
    out = tmp_path / "run"
    # forward_loss runs twice a step (accumulation 2): the 9th is in step 5, after the checkpoint of step 4
    status = run_in_child(out, [kill_at_call(T, "forward_loss", 9)], resume="auto", **flags)
    assert _killed(status), (out.parent / "child.log").read_text()[-2000:]
    original, stat = corpus.read_bytes(), corpus.stat()
    corpus.write_bytes(original.replace(b"queen", b"QUEEN"))
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(
        ValueError,
        match=rf"Cannot resume .*checkpoint-0*4: the training data changed .*{corpus} \(its contents changed\)",
    ):
        _run(out, resume="auto", **flags)
    corpus.write_bytes(original)
    metrics = _run(out, resume="auto", **flags)
    assert metrics["step"] == 6 and _same_weights(reference, out)


# ---------------------------------------------------------------------------------------------
# blocks too short to predict anything
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "objective, family, shortest",
    [("clm", "gpt", 2), ("mlm", "bert", 2), ("electra", "electra", 2), ("span_corruption", "t5", 2)],
)
def test_a_block_with_nothing_to_predict_is_refused_by_name(tmp_path, objective, family, shortest):
    """`--block_size 1` trained on an empty loss and stopped with "lower the learning rate"."""
    with pytest.raises(
        ValueError, match=rf"--block_size 1 leaves objective '{objective}' nothing to predict"
    ):
        check_arguments(*_args(tmp_path, objective=objective, family=family, block_size=1))
    # the shortest block that works, with a batch that masks something
    check_arguments(*_args(tmp_path, objective=objective, family=family, block_size=max(shortest, 32)))


def test_bart_denoising_trains_one_token_blocks(tmp_path):
    """BART's target is the whole clean block: one token is something to predict (and its noised
    source, with <s>, </s> and inserted masks, fits the position table)."""
    check_arguments(*_args(tmp_path, objective="bart_denoising", family="bart", block_size=1))
    metrics = T.train(
        *_args(
            tmp_path,
            objective="bart_denoising",
            family="bart",
            block_size=1,  # <s> x </s>: longer than a table of twice the block
            tokenizer_kind="char",
            vocab_size=40,
            num_hidden_layers=1,
            hidden_size=16,
            num_attention_heads=2,
            max_steps=2,
            per_device_batch_size=4,
            eval_every=2,
            save_every=2,
        )
    )
    assert torch.isfinite(torch.tensor(metrics["eval_loss"]))


def test_masked_lm_blocks_too_short_for_the_batch_are_refused(tmp_path):
    """One maskable token a row, 8 rows: a micro-batch masks nothing 27% of the time (a NaN loss)."""
    with pytest.raises(
        ValueError, match=r"--block_size 2 is too short for objective 'mlm'.*--per_device_batch_size"
    ):
        check_arguments(
            *_args(tmp_path, objective="mlm", family="bert", block_size=2, per_device_batch_size=8)
        )


def test_block_size_one_is_refused_before_the_data_on_the_command_line(tmp_path):
    argv = as_flags(
        {"dataset": str(tmp_path / "absent.txt"), "block_size": 1, "output_dir": str(tmp_path / "o")}
    )
    with pytest.raises(ValueError, match="--block_size 1 leaves objective 'clm' nothing to predict"):
        T.main(argv)  # the corpus does not exist: the refusal comes first


# ---------------------------------------------------------------------------------------------
# argument files: numbers as YAML 1.1 writes them, and files that hold no mapping
# ---------------------------------------------------------------------------------------------


def test_yaml_scientific_notation_is_a_number(tmp_path):
    """PyYAML reads YAML 1.1, where `1e-3` (no dot) is a string: it crashed with a TypeError."""
    path = tmp_path / "run.yaml"
    path.write_text("learning_rate: 1e-3\nmax_steps: 1e2\nmin_lr_rate: '0.1'\nstreaming: yes\nsplit: 1\n")
    data, _, train = parse_args([str(path)])
    assert train.learning_rate == 0.001 and train.max_steps == 100 and train.min_lr_rate == 0.1
    assert data.streaming is True and data.split == "1"
    # the same file followed by flags
    data, _, train = parse_args([str(path), "--max_steps", "7"])
    assert train.learning_rate == 0.001 and train.max_steps == 7
    # YAML 1.1's other booleans: `mixed_precision: no` (the default written out) became 'false', refused
    path.write_text("mixed_precision: no\nstreaming: on\nresume: yes\ntf32: No\nsplit: y\n")
    data, _, train = parse_args([str(path)])
    assert (train.mixed_precision, data.streaming, train.resume, train.tf32, data.split) == (
        "no",
        True,
        "true",
        False,
        "y",
    )
    json_path = tmp_path / "run.json"
    json_path.write_text(json.dumps({"learning_rate": "3e-4", "max_steps": "12"}))
    assert parse_args([str(json_path)])[2].learning_rate == 3e-4


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("list.yaml", "- learning_rate: 1.0e-3\n", r"list.yaml must hold a mapping .* got a list"),
        ("list.json", "[1, 2]", r"list.json must hold a mapping .* got a list"),
        ("string.json", '"learning_rate"', r"string.json must hold a mapping .* got a str"),
        ("empty.yaml", "", r"empty.yaml must hold a mapping .* got nothing"),
        ("nested.json", '{"learning_rate": {"value": 1}}', r"nested.json: `learning_rate` must be a number"),
        ("nested.yaml", "max_steps: [1, 2]\n", r"nested.yaml: `max_steps` must be an integer, got a list"),
        ("word.yaml", "learning_rate: fast\n", r"word.yaml: `learning_rate` must be a number, got 'fast'"),
        ("null.yaml", "learning_rate:\n", r"null.yaml: `learning_rate` is empty"),
        ("null_list.yaml", "report_to:\n", r"null_list.yaml: `report_to` is empty"),  # was a TypeError
        (
            "typo.json",
            '{"learnin_rate": 1}',
            r"typo.json has keys .*'learnin_rate' \(did you mean 'learning_rate'\?\)",
        ),
        ("broken.json", '{"learning_rate": ', r"broken.json is not a valid JSON file"),
        ("broken.yaml", "a: [\n", r"broken.yaml is not a valid YAML file"),
    ],
)
def test_bad_argument_files_are_refused_naming_the_file(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        parse_args([str(path)])


# ---------------------------------------------------------------------------------------------
# data files that are no files
# ---------------------------------------------------------------------------------------------


def test_a_fake_gzip_file_is_named(tmp_path):
    fake = tmp_path / "data.txt.gz"
    fake.write_text(TEXT)  # plain text under a .gz name
    for source in (fake, tmp_path):
        with pytest.raises(DataFileError, match=rf"Cannot load {fake}, not a valid gzip file"):
            load_text_dataset(str(source))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_gzip_file_damaged_after_its_start_is_named(tmp_path, streaming):
    data = gzip.compress(os.urandom(1 << 17).hex().encode())  # incompressible: damage past the first read
    damaged = tmp_path / "data.txt.gz"
    damaged.write_bytes(data[: len(data) // 2])  # cut short, as by an interrupted download
    with pytest.raises(DataFileError, match=rf"{damaged}, not a valid gzip file"):
        dataset = load_text_dataset(str(damaged), streaming=streaming)
        for _ in dataset:
            pass


def test_a_fifo_in_a_data_folder_is_refused_not_waited_on(tmp_path):
    """`datasets` blocked on it or said "Unable to find" a file that exists."""
    folder = tmp_path / "data"
    folder.mkdir()
    _corpus(folder, name="a.txt")
    os.mkfifo(folder / "pipe.txt")
    result = {}

    def load():
        try:
            load_text_dataset(str(folder))
        except Exception as err:
            result["error"] = err

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout=60)
    if thread.is_alive():  # unblock the reader before failing
        with open(folder / "pipe.txt", "w"):
            pass
        pytest.fail("loading the folder waited on its FIFO")
    assert isinstance(result.get("error"), DataFileError)
    assert f"{folder / 'pipe.txt'}: not a regular file, a FIFO" in str(result["error"])
    with pytest.raises(DataFileError, match="a FIFO"):  # named directly, or matched by a glob
        load_text_dataset(str(folder / "pipe.txt"))
    with pytest.raises(DataFileError, match="a FIFO"):
        load_text_dataset(str(folder / "*.txt"))


def test_links_to_nowhere_in_a_data_folder_are_named(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _corpus(folder, name="a.txt")
    os.symlink("loop.txt", folder / "loop.txt")
    with pytest.raises(
        DataFileError, match=rf"{folder / 'loop.txt'}: not a regular file, a symbolic link loop"
    ):
        load_text_dataset(str(folder))
    (folder / "loop.txt").unlink()
    os.symlink(tmp_path / "gone.txt", folder / "dangling.txt")
    with pytest.raises(
        DataFileError, match=r"dangling.txt: not a regular file, a symbolic link to .*gone.txt"
    ):
        load_text_dataset(str(folder))
    (folder / "dangling.txt").unlink()
    assert len(load_text_dataset(str(folder))) > 0
