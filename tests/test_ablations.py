"""The ablation runner (`benchmarks/ablations.py`): the grid, its flags, its bookkeeping, a smoke run."""

import csv
import json
import math
import os

import pytest
import torch
from conftest import SHARED_DATA

from benchmarks import ablations
from hf_lm import HfLmGPTForCausalLM

TINY_SHAKESPEARE = os.path.join(SHARED_DATA, "tinyshakespeare", "input.txt")
SIZE = ablations.ModelSize(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128)
V, BLOCK = 67, 32

# the config fields each component may change; a variant that changes anything else is not one
# component away from the baseline
COMPONENT_FIELDS = {
    "baseline": set(),
    "activation": {"hidden_act", "intermediate_size"},
    "norm": {"norm_type", "norm_position"},
    "positions": {"position_embedding_type"},
    "embeddings": {"tie_word_embeddings", "embedding_size"},
    # a band's window is also Mistral's `sliding_window`, stored beside it
    "attention": {"num_key_value_heads", "attention_pattern", "attention_window", "sliding_window"},
    "sharing": {"num_hidden_groups"},
    "experts": {
        "num_local_experts",
        "num_experts_per_tok",
        "capacity_factor",
        "norm_topk_prob",
        "router_aux_loss_coef",
    },
}


def build(name, match_glu=True):
    config = ablations.variant_config(ablations.VARIANTS_BY_NAME[name], SIZE, V, BLOCK, match_glu)
    return HfLmGPTForCausalLM(config).eval()


def params(name, match_glu=True):
    return build(name, match_glu).num_parameters()


@pytest.mark.parametrize("name", sorted(ablations.VARIANTS_BY_NAME))
def test_every_variant_builds_and_differs_from_the_baseline_in_one_component(name):
    variant = ablations.VARIANTS_BY_NAME[name]
    model = build(name)
    x = torch.randint(0, V, (2, BLOCK))
    out = model(x, labels=x)
    assert out.logits.shape == (2, BLOCK, V) and torch.isfinite(out.loss)
    base = build("baseline").config.to_dict()
    changed = {k for k, v in model.config.to_dict().items() if base.get(k) != v}
    assert changed <= COMPONENT_FIELDS[variant.component], changed
    assert (name == "baseline") == (not changed)


def test_parameter_count_relations():
    H, L, P = SIZE.hidden_size, SIZE.num_hidden_layers, BLOCK
    base = params("baseline")
    assert params("baseline") < params("untied") == base + V * H  # tied < untied
    assert params("mqa") < params("gqa") < base  # fewer key/value heads, smaller qkv projection
    # one block instead of L: exactly L - 1 blocks fewer
    per_block = sum(p.numel() for p in build("baseline").model.layers[0].parameters())
    assert params("shared_blocks") == base - (L - 1) * per_block
    assert params("factorized_embeddings") < base
    # schemes without a learned table lose exactly the P x H position embeddings
    for name in ("sinusoidal", "rope", "alibi", "no_positions"):
        assert params(name) == base - P * H, name
    assert params("relu") == base
    assert params("rmsnorm") == base - (2 * L + 1) * H  # no norm biases
    assert params("post_norm") == base - 2 * H  # a post-norm stack has no final norm
    # gated feed-forwards at 2/3 width stay within 2% of the baseline; at full width they grow
    for name in ("swiglu", "geglu", "reglu"):
        assert abs(params(name) - base) / base < 0.03, name
        assert params(name, match_glu=False) > base * 1.1, name  # full width: 3 matrices, not 2


def test_flags_build_the_same_model_as_the_config(tmp_path):
    """What the runner passes to `training.train` builds exactly the variant's config."""
    from training.args import parse_args
    from training.data.tokenizer import train_tokenizer
    from training.objectives import build_model

    tokenizer = train_tokenizer(["".join(chr(32 + i) for i in range(V - 2)) * 2], kind="char", vocab_size=V)
    assert len(tokenizer) == V
    args = ablations.parse_args(
        ["--smoke", "--hidden_size", "32", "--num_hidden_layers", "3", "--block_size", str(BLOCK)]
    )
    data = {"train_file": "train.txt", "validation_file": "validation.txt"}
    for variant in ablations.VARIANTS:
        command = ablations.run_command(args, variant, 0, data, tmp_path / "tok", tmp_path / "run")
        assert command[1:3] == ["-m", "training.train"]
        data_args, model_args, train_args = parse_args(command[3:])
        assert (train_args.max_steps, train_args.seed, train_args.eval_every) == (8, 0, 2)
        trained = build_model(model_args, data_args, tokenizer)
        expected = build(variant.name)
        for field in ablations.variant_fields(variant, SIZE) | {"hidden_size": 0, "num_hidden_layers": 0}:
            assert getattr(trained.config, field) == getattr(expected.config, field), (variant.name, field)
        assert trained.num_parameters() == expected.num_parameters(), variant.name


def test_select_variants():
    names = [v.name for v in ablations.select_variants("mqa,positions")]
    assert names == ["baseline", "sinusoidal", "rope", "alibi", "no_positions", "mqa"]  # grid order
    assert len(ablations.select_variants(None)) == len(ablations.VARIANTS) == 19
    with pytest.raises(ValueError, match="Unknown variant or component 'swish'"):
        ablations.select_variants("swish")
    with pytest.raises(SystemExit):
        ablations.parse_args(["--variants", "swish"])
    with pytest.raises(SystemExit):
        ablations.parse_args(["--seeds", "a,b"])


def test_read_run_skips_intervals_holding_an_evaluation(tmp_path):
    """Step time: median over log intervals without an evaluation; early loss: first eval >= the early step."""
    fields = ["step", "loss", "eval_loss", "seconds"]
    rows = [
        (1, 4.0, None, 0.10),
        (2, 3.9, 3.95, 0.20),  # evaluated after `seconds` was taken: (2, 3] holds it
        (3, 3.8, None, 5.20),
        (4, 3.7, None, 5.30),
        (5, 3.6, 3.65, 5.40),
        (6, 3.5, None, 9.40),
        (6, None, 3.55, 9.90),  # the final evaluation row
    ]
    with open(tmp_path / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])
    (tmp_path / "final_metrics.json").write_text(json.dumps({"eval_loss": 3.55, "step": 6, "seconds": 9.9}))
    from safetensors.torch import save_file

    (tmp_path / "final").mkdir()
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(tmp_path / "final" / "model.safetensors"))
    run = ablations.read_run(tmp_path, early_step=2)
    assert run["step_time_ms"] == pytest.approx(100.0)  # (1,2], (3,4], (4,5] all 0.1 s
    assert (run["early_loss"], run["early_loss_step"]) == (3.95, 2)
    assert ablations.read_run(tmp_path, early_step=3)["early_loss_step"] == 5
    assert (run["final_loss"], run["steps"], run["parameters"]) == (3.55, 6, 17)
    assert ablations.mean_std([1.0, 3.0, None]) == {"mean": 2.0, "std": pytest.approx(2**0.5), "n": 2}
    assert ablations.mean_std([None]) == {"mean": None, "std": None, "n": 0}


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.isfile(TINY_SHAKESPEARE), reason=f"Tiny Shakespeare not found at {TINY_SHAKESPEARE}"
)
def test_smoke_run_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "ablations"
    argv = ["--smoke", "--variants", "mqa", "--seeds", "0,1", "--output_dir", str(out)]
    report = ablations.main(argv)
    names = ["baseline", "mqa"]  # every variant builds: test_parameter_count_relations and the ones above
    table = (out / "ablations.md").read_text()
    assert [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")][1:] == names
    saved = json.loads((out / "ablations.json").read_text())
    assert [v["name"] for v in saved["variants"]] == names and saved["seeds"] == [0, 1]
    assert saved["budget"]["max_steps"] == 8 and saved["hardware"]["torch"] == torch.__version__
    assert saved["data"]["vocab_size"] == 68  # 65 characters and three special tokens, shared by all runs
    for row in saved["variants"]:
        assert [r["status"] for r in row["runs"]] == ["ok", "ok"], row["runs"]
        assert all("--seed" in r["command"] and "training.train" in r["command"] for r in row["runs"])
        assert row["final_loss"]["n"] == 2 and row["final_loss"]["std"] is not None
        assert row["early_loss"]["mean"] is not None and row["step_time_ms"]["mean"] > 0
        assert row["final_loss"]["mean"] < math.log(68)  # it learned: below the uniform 68-way loss
    by_name = {row["name"]: row for row in saved["variants"]}
    assert by_name["mqa"]["parameters"]["mean"] < by_name["baseline"]["parameters"]["mean"]
    assert (out / "ablations.png").stat().st_size > 10_000
    assert report["variants"][0]["name"] == "baseline"
    # the same command again reuses every finished run
    again = ablations.main(argv)
    assert {r["status"] for row in again["variants"] for r in row["runs"]} == {"reused"}


def test_expert_rows_count_all_parameters_but_only_active_flops():
    """Narang et al.'s columns for the mixtures: parameters grow with every expert, FLOPs per token
    only with the k a token is routed to (and the router)."""
    H, L, F = SIZE.hidden_size, SIZE.num_hidden_layers, SIZE.intermediate_size
    E = 4
    expert = 2 * H * F + F + H  # up and down projections with biases
    base = params("baseline")
    assert params("moe") == params("switch") == base + L * ((E - 1) * expert + H * E)
    flops = {
        name: ablations.forward_flops_per_token(build(name).config, BLOCK)
        for name in ("baseline", "moe", "switch")
    }
    router = 2 * L * H * E
    assert flops["switch"] == flops["baseline"] + router  # one expert: the dense cost plus routing
    assert flops["moe"] == flops["baseline"] + router + L * 2 * (2 * H * F)  # a second expert's matmuls
