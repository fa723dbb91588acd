"""ELECTRA's joint pretraining (Clark et al., 2020): a small masked-LM generator and a discriminator.

Replaced-token detection: the generator, a masked LM, predicts the masked tokens of a block; its
samples replace them, and the discriminator learns, for every token of the corrupted block, whether
it is the original or a replacement. Following the paper:

- the generator is smaller (`generator_size` = 1/4 of the discriminator's width: hidden size,
  heads and feed-forward; the same depth), which works better than an equally large one (its §3.2);
- the two share their embeddings (token, position and segment embeddings and their norm, all E
  wide; the original code shares the whole embedding scope), so the generator's softmax trains
  the discriminator's token embeddings too (§3.2);
- the samples are drawn from the generator's softmax (temperature 1), with no gradient through
  the sampling: the generator is trained by its MLM loss only (the discriminator's loss cannot
  reach it, §2);
- a sampled token equal to the original counts as original (label 0), not replaced (§2);
- loss = MLM loss + λ · discriminator loss with λ = 50 (`discriminator_weight`, Appendix A).

`ElectraPretrainingModel` is the model the training loop trains (`training.objectives.Electra`): the
discriminator itself (`HfLmElectraForPreTraining`, so the family table, the card and the checkpoint
config read it as one) with the generator attached. `save_pretrained` writes the discriminator, the
model to fine-tune, and the generator in `generator/`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.utils import ModelOutput

from hf_lm.models.hflm_configuration_electra import HfLmElectraConfig
from hf_lm.models.hflm_modeling_electra import HfLmElectraForMaskedLM, HfLmElectraForPreTraining

from ..sharding import catch_up, plan_forwards
from .evaluation import eval_shards

# the parts of the embeddings the generator takes from the discriminator (those with parameters)
SHARED_EMBEDDINGS = ("embed_tokens", "positions", "token_type_embeddings", "embed_norm")


def generator_config(config: HfLmElectraConfig, size: float) -> HfLmElectraConfig:
    """The generator's config: the discriminator's, `size` times as wide (hidden size, heads and
    feed-forward; at least one head of the discriminator's head size), with the same embedding size
    E (the embeddings are shared) and `sparse_prediction` (the MLM head runs on the masked rows only).
    """
    heads = max(1, round(config.num_attention_heads * size))
    hidden = heads * config.head_dim  # the discriminator's head size: divisible by construction
    values = config.to_dict()
    for key in ("model_type", "transformers_version", "architectures", "auto_map", "head_dim"):
        values.pop(key, None)
    values.update(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=None,
        intermediate_size=max(1, round(config.intermediate_size * size)),
        embedding_size=config.embedding_size,
        sparse_prediction=True,
    )
    return HfLmElectraConfig(**values)


def share_embeddings(generator: HfLmElectraForMaskedLM, discriminator: HfLmElectraForPreTraining) -> None:
    """Make the generator use the discriminator's embedding modules (the same Parameters), and tie
    its output layer to the shared token embeddings again."""
    for name in SHARED_EMBEDDINGS:
        module = getattr(discriminator.model, name)
        if module is not None and any(True for _ in module.parameters()):
            setattr(generator.model, name, module)
    if generator.config.tie_word_embeddings:
        generator.lm_head.decoder.weight = discriminator.model.embed_tokens.weight


def sample_replacements(logits: torch.Tensor, seed: int | None) -> torch.Tensor:
    """(N,) token ids sampled from the softmax of `logits` (N, V), without gradient.

    Inverse-CDF sampling: one uniform number per row, drawn on the CPU (N numbers, cheap to move)
    and looked up in the cumulated probabilities on the logits' device. `seed` makes the draw a pure
    function of the data position (as the masks are, `training.objectives.mask_seed`), so a resumed
    run samples what an uninterrupted one did, on any device; None draws from the global RNG.
    """
    probs = torch.softmax(logits.detach().float(), dim=-1)  # (N, V)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    u = torch.rand(probs.shape[0], 1, generator=generator).to(probs.device)  # (N, 1)
    cdf = probs.cumsum(dim=-1)  # (N, V)
    # the first token whose cumulated probability reaches u: token i with probability p_i
    picked = torch.searchsorted(cdf, u * cdf[:, -1:])  # (N, 1); scaled so rounding never passes the end
    return picked.clamp_(max=probs.shape[-1] - 1).squeeze(-1)  # (N,)


def corrupt(
    input_ids: torch.Tensor, labels: torch.Tensor, sampled: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and labels.

    Args:
        input_ids: (B, T) the generator's (masked) input.
        labels: (B, T) the masked-LM labels: the original token where a position was selected,
            -100 elsewhere.
        sampled: (N,) the generator's samples for the N selected positions, in row-major order.

    Returns:
        `corrupted` (B, T): the original tokens, with the samples at the selected positions (whatever
        the 80/10/10 rule put there), and `replaced` (B, T): 1 where `corrupted` differs from the
        original token, 0 elsewhere, including where the generator sampled the original.
    """
    selected = labels != -100  # (B, T)
    original = torch.where(selected, labels, input_ids)  # (B, T)
    corrupted = original.masked_scatter(selected, sampled.to(original.dtype))  # (B, T)
    return corrupted, (corrupted != original).long()


@dataclass
class ElectraPretrainingOutput(ModelOutput):
    """Outputs of `ElectraPretrainingModel`.

    Args:
        loss: `generator_loss + discriminator_weight * discriminator_loss`.
        logits: (B, T) the discriminator's scores on the corrupted input (> 0: "replaced").
        generator_loss: the masked-LM loss (mean over the masked tokens).
        discriminator_loss: the replaced-token-detection loss (mean over the unpadded tokens).
        replaced: (B, T) the discriminator's labels (1 replaced, 0 original).
        generator_correct: how many masked tokens the generator's argmax predicts.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    generator_loss: torch.FloatTensor | None = None
    discriminator_loss: torch.FloatTensor | None = None
    replaced: torch.LongTensor | None = None
    generator_correct: torch.LongTensor | None = None


class ElectraPretrainingModel(HfLmElectraForPreTraining):
    """The discriminator with the generator attached (`self.generator`), trained jointly.

    The checkpoints of a run hold both (the shared embeddings once); `save_pretrained` writes the
    discriminator alone, a plain `HfLmElectraForPreTraining`, and the generator in `generator/`.
    """

    def __init__(
        self, config: HfLmElectraConfig, generator_size: float = 0.25, discriminator_weight: float = 50.0
    ):
        super().__init__(config)
        self.discriminator_weight = discriminator_weight
        self.generator = HfLmElectraForMaskedLM(generator_config(config, generator_size))
        share_embeddings(self.generator, self)

    def forward(self, input_ids, attention_mask=None, labels=None, sampling_seed=None, **kwargs):
        """One ELECTRA step on a masked batch.

        Args:
            input_ids: (B, T) the masked block (the masked-LM collator's output).
            attention_mask: (B, T) 1 for tokens, 0 for padding.
            labels: (B, T) the masked-LM labels (the original token where selected, else -100).
            sampling_seed: seeds the generator's samples (None: the global RNG).
        """
        gen = self.generator(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        selected = labels != -100  # (B, T)
        logits = gen.logits if gen.logits.dim() == 2 else gen.logits[selected]  # (N, V)
        correct = (logits.argmax(-1) == labels[selected]).sum()
        corrupted, replaced = corrupt(input_ids, labels, sample_replacements(logits, sampling_seed))
        disc = super().forward(input_ids=corrupted, attention_mask=attention_mask, labels=replaced, **kwargs)
        return ElectraPretrainingOutput(
            loss=gen.loss + self.discriminator_weight * disc.loss,
            logits=disc.logits,
            generator_loss=gen.loss,
            discriminator_loss=disc.loss,
            replaced=replaced,
            generator_correct=correct,
        )

    def discriminator(self) -> HfLmElectraForPreTraining:
        """A plain `HfLmElectraForPreTraining` holding this model's discriminator weights."""
        model = HfLmElectraForPreTraining(self.config)
        weights = {k: v for k, v in self.state_dict().items() if not k.startswith("generator.")}
        model.load_state_dict(weights)
        param = next(self.parameters())
        return model.to(device=param.device, dtype=param.dtype)

    def save_pretrained(self, save_directory, **kwargs) -> None:
        """The discriminator (the model to fine-tune) into `save_directory`, the generator into
        `save_directory/generator`: each a folder `from_pretrained` loads on its own."""
        self.discriminator().save_pretrained(save_directory, **kwargs)
        self.generator.save_pretrained(Path(save_directory) / "generator", **kwargs)

    @classmethod
    def from_folders(
        cls, folder, generator_size: float = 0.25, discriminator_weight: float = 50.0
    ) -> ElectraPretrainingModel:
        """The joint model of a saved `final/` (the discriminator, the generator in `generator/`), to
        continue pretraining (`--init_from`)."""
        discriminator = HfLmElectraForPreTraining.from_pretrained(folder, dtype=torch.float32)
        generator = HfLmElectraForMaskedLM.from_pretrained(Path(folder) / "generator", dtype=torch.float32)
        model = cls(discriminator.config, generator_size, discriminator_weight)
        model.generator = generator
        share_embeddings(generator, model)
        model.load_state_dict(discriminator.state_dict(), strict=False)
        return model


@torch.no_grad()
def evaluate_electra(
    model, blocks, noise, sampling_seed, weight: float, accelerator, batch_size: int, num_blocks: int
):
    """Both losses and the discriminator's accuracy under fixed masks and samples, over the eval
    blocks sharded across processes.

    Args:
        noise: (ids, batch number, rank) -> masked inputs with labels (the objective's eval noise).
        sampling_seed: (batch number, rank) -> the seed of the generator's samples.
        weight: λ, the discriminator loss's weight in `eval_loss`.

    Returns:
        `eval_loss` (MLM loss + λ · discriminator loss, the training loss), `eval_mlm_loss` (nats per
        masked token), `eval_mlm_accuracy` (the generator's argmax), `eval_disc_loss` (per token),
        `eval_disc_accuracy` (replaced vs original, every unpadded token) and `eval_replaced_fraction`
        (the share of tokens the generator's samples changed).
    """
    model.eval()
    device = accelerator.device
    world, rank = accelerator.num_processes, accelerator.process_index
    # mlm loss sum, mlm correct, masked tokens, disc loss sum, disc correct, replaced, tokens
    totals = torch.zeros(7, dtype=torch.float64, device=device)
    shards = list(eval_shards(num_blocks, batch_size, world, rank))
    plan_forwards(model, len(shards), device)  # FSDP: every process as many
    for i, idx in shards:
        batch = {k: v.to(device) for k, v in noise(blocks["input_ids"][idx], i, rank).items()}
        out = model(**batch, sampling_seed=sampling_seed(i, rank))
        masked = (batch["labels"] != -100).sum()
        real = batch["attention_mask"] != 0  # (B, T)
        tokens = real.sum()
        disc_correct = (((out.logits > 0).long() == out.replaced) & real).sum()
        totals += torch.stack(
            [
                out.generator_loss.double() * masked,
                out.generator_correct.double(),
                masked.double(),
                out.discriminator_loss.double() * tokens,
                disc_correct.double(),
                (out.replaced.bool() & real).sum().double(),
                tokens.double(),
            ]
        )
    catch_up(model)
    totals = accelerator.reduce(totals, reduction="sum")
    model.train()
    mlm_sum, mlm_correct, masked, disc_sum, disc_correct, replaced, tokens = totals.tolist()
    mlm = mlm_sum / masked if masked else math.nan
    disc = disc_sum / tokens if tokens else math.nan
    return {
        "eval_loss": mlm + weight * disc,
        "eval_mlm_loss": mlm,
        "eval_mlm_accuracy": mlm_correct / masked if masked else math.nan,
        "eval_disc_loss": disc,
        "eval_disc_accuracy": disc_correct / tokens if tokens else math.nan,
        "eval_replaced_fraction": replaced / tokens if tokens else math.nan,
    }
