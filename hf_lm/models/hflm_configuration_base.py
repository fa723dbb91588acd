"""The configuration fields every hf_lm Transformer family shares, validated once at construction.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.

Each family's config holds only the fields its models read: `HfLmTransformerConfig` the shared ones,
`HfLmMoETransformerConfig` adds the mixture-of-experts fields (GPT, T5, BART), and the families add
their own (GPT's `sliding_window` and `xpos_scale_base`, T5/BART's decoder and `encoder_sparse_step`,
BERT's segments). Generic tools read a config's keys to tell what a model is (a key starting with
"encoder" marks an encoder-decoder to transformers' own test mixins): a decoder-only config carries
no encoder field, an encoder no decoder field.
"""

from __future__ import annotations

import logging

from transformers import PreTrainedConfig

from .hflm_common import (
    FEED_FORWARD_NAMES,
    NORM_NAMES,
    NORM_POSITIONS,
    POSITION_ENCODING_NAMES,
    HfLmConfigMixin,
    _attention_pattern,
    _bool,
    _choice,
    _dropout,
    _non_negative,
    _positive,
    _positive_int,
    _token_ids,
)
from .hflm_pretrained import (
    installed_pipelines_dropped,
)

logger = logging.getLogger(__name__)

# the feed-forwards with a gate: three matrices instead of two (parameter estimates)
GATED_FEED_FORWARDS = ("swiglu", "geglu", "geglu_tanh", "reglu")

# Fields that hf_lm configs once carried for every Transformer family and that now live only in the
# families that read them, with the values that mean "unused". A config.json written before may
# still hold them: reading it drops them, silently at these values. Another value never had an effect
# there (it is logged), except the fields whose value would change what the user asked for: those are
# refused (`_REFUSED_IF_SET`), at construction and when a model is built.
OTHER_FAMILY_FIELDS = {
    "num_local_experts": (0,),
    "num_experts": (0,),
    "num_experts_per_tok": (None,),
    "expert_capacity": (None,),
    "capacity_factor": (None,),
    "norm_topk_prob": (True,),
    "noisy_gating": (False,),
    "router_jitter_noise": (0, 0.0),
    "router_aux_loss_coef": (None, 0, 0.0),
    "router_z_loss_coef": (0, 0.0),
    "output_router_logits": (False,),
    "encoder_sparse_step": (1,),
    "decoder_sparse_step": (1,),
    "xpos_scale_base": (512,),
    "sliding_window": (None,),
}
_REFUSED_IF_SET = ("num_local_experts", "num_experts", "sliding_window")


class HfLmTransformerConfig(HfLmConfigMixin, PreTrainedConfig):
    """Shared fields of hf_lm's Transformer families (not registered itself: families subclass it).

    Args:
        vocab_size: number of tokens V.
        hidden_size: model width C.
        num_hidden_layers: number of Transformer blocks.
        num_attention_heads: query heads nh.
        num_key_value_heads: key/value heads nkv; nh = MHA, 1 = MQA, in between = GQA. Defaults to nh.
        head_dim: size of one head; defaults to `hidden_size // num_attention_heads`.
        intermediate_size: feed-forward width; defaults to `4 * hidden_size`.
        hidden_act: feed-forward variant, one of `FEED_FORWARD_NAMES` ("relu", "gelu", "gelu_tanh",
            "swiglu", "geglu", "reglu").
        position_embedding_type: one of "learned", "sinusoidal", "rope", "alibi",
            "relative_buckets" (T5), "none", "xpos" (RoPE with a decay, causal stacks only).
        max_position_embeddings: longest input the learned positions allow (also the default
            context length for the other schemes).
        rope_theta: RoPE base frequency (also xPos's).
        relative_attention_num_buckets, relative_attention_max_distance: T5's bucketed relative
            position bias (`position_embedding_type="relative_buckets"`): half of the buckets (of each
            direction, in a bidirectional stack) hold exact distances, so there must be at least one
            such bucket, and the log-spaced ones reach `relative_attention_max_distance`, which must lie
            beyond them.
        attention_scale: factor on the attention scores; `None` = 1/sqrt(head_dim). T5 uses 1.0
            (the scale is folded into its initialization).
        norm_type: "layernorm" or "rmsnorm".
        norm_position: "pre" (GPT-2, Llama) or "post" (original Transformer, BERT).
        norm_eps: epsilon of the norms.
        attention_bias: biases in the query/key/value/output projections.
        mlp_bias: biases in the feed-forward projections.
        hidden_dropout: dropout on embeddings and residual branches.
        attention_dropout: dropout on attention probabilities.
        initializer_range: std of the normal init.
        tie_word_embeddings: share the input embedding and the output projection.
        use_cache: return a KV cache by default.
        pad_token_id, bos_token_id, eos_token_id: special tokens, `None` or ids inside the vocabulary.
        attention_pattern: which keys each query may attend to: "dense" (all), or distinct parts
            joined with "+", their union: "global" (the first `num_global_tokens` tokens attend
            to and are attended by every token), "band" (keys at most `attention_window` tokens
            away: a sliding window), "dilated" (every `attention_dilation`-th key up to
            `attention_window * attention_dilation` away), "random" (`num_random_keys` keys per
            query, chosen by a seeded hash of the two positions), "block" (keys in the query's
            block of `attention_block_size` tokens). "band+global" is Longformer's (Beltagy et
            al., 2020), "band+global+random" BigBird's (Zaheer et al., 2020). It applies to the
            self-attention of GPT, BERT and the T5/BART encoder, intersected with causality and
            padding; a T5/BART decoder stays dense. Distances count real tokens (padding aside).
        attention_window: w, the band's reach on each side (a causal query sees w + 1 keys:
            Mistral's `sliding_window` is w + 1, Longformer's `attention_window` 2w; GPT's config
            takes Mistral's `sliding_window` too, see `HfLmGPTConfig`).
        attention_dilation: d, the dilated window's gap (d = 1 is the band).
        num_global_tokens: g, how many leading tokens are global.
        attention_block_size: b, the block-local pattern's block length.
        num_random_keys: r, random keys per query (fewer when fewer keys are allowed).
        attention_random_seed: the random pattern's seed; the same on every device.
        embedding_size: width E of the token (and absolute position) embeddings; `None` = hidden
            size. E < H is ALBERT's factorized embedding (Lan et al., 2020): a V x E table and an
            E -> H projection, V*E + E*H parameters instead of V*H.
        num_hidden_groups: number of distinct blocks; layer i runs block `i * groups // layers`.
            `None` = one block per layer; 1 = ALBERT's cross-layer sharing of a single block.

    The ALBERT options are implemented by the families that set `supports_albert_options` (GPT, BERT);
    the others refuse values other than the defaults rather than silently ignoring them.
    """

    # whether the family implements `embedding_size` and `num_hidden_groups` (a class attribute, not a field)
    supports_albert_options = False
    # whether the family runs a bidirectional stack (an encoder), which xPos's one-sided decay cannot serve
    has_bidirectional_stack = True
    # why a non-None `sliding_window` (a field of GPT's config only) is refused by this family
    sliding_window_refusal = "it has no cached causal self-attention to slide"
    # the sizes the derived fields are computed from (class attributes, not fields)
    _base_sizes = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
    # the fields the parameter count grows with (`size_fields`)
    size_field_names = (
        "num_hidden_layers",
        "num_hidden_groups",
        "hidden_size",
        "intermediate_size",
        "vocab_size",
    )

    vocab_size: int = 50257
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    hidden_act: str = "gelu_tanh"
    position_embedding_type: str = "learned"
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    attention_scale: float | None = None
    norm_type: str = "layernorm"
    norm_position: str = "pre"
    norm_eps: float = 1e-5
    attention_bias: bool = True
    mlp_bias: bool = True
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    embedding_size: int | None = None
    num_hidden_groups: int | None = None
    attention_pattern: str = "dense"
    attention_window: int = 128
    attention_dilation: int = 2
    num_global_tokens: int = 1
    attention_block_size: int = 64
    num_random_keys: int = 3
    attention_random_seed: int = 0

    def __post_init__(self, **kwargs):
        kwargs = self._without_other_family_fields(kwargs)
        # derived fields first, so they are validated like the rest
        for name in self._base_sizes:
            _positive_int(name, getattr(self, name))
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"`hidden_size` ({self.hidden_size}) must be divisible by `num_attention_heads` "
                    f"({self.num_attention_heads}), or set `head_dim` explicitly."
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        if self.supports_albert_options:
            if self.embedding_size is None:
                self.embedding_size = self.hidden_size
            if self.num_hidden_groups is None:
                self.num_hidden_groups = self.num_hidden_layers
        super().__post_init__(**installed_pipelines_dropped(type(self), kwargs))
        self.validate_hflm()

    def _without_other_family_fields(self, kwargs: dict) -> dict:
        """`kwargs` less the fields of other families (`OTHER_FAMILY_FIELDS`) this config does not have."""
        kwargs, ignored = dict(kwargs), []
        for name, unused in OTHER_FAMILY_FIELDS.items():
            if name in self.__dataclass_fields__ or name in self.attribute_map or name not in kwargs:
                continue
            value = kwargs.pop(name)
            self._refuse_other_family_field(name, value)
            if not any(value is u or (type(value) is type(u) and value == u) for u in unused):
                ignored.append(f"{name}={value!r}")
        if ignored:
            logger.warning(
                "Ignoring %s: %s has no such field (a config.json written by an older hf_lm carried them).",
                ", ".join(ignored),
                self.model_type or type(self).__name__,
            )
        return kwargs

    def _refuse_other_family_field(self, name: str, value) -> None:
        """A ValueError for the other family's fields whose value this family would silently ignore."""
        if name not in _REFUSED_IF_SET or value in OTHER_FAMILY_FIELDS[name]:
            return
        family = self.model_type or type(self).__name__
        if name == "sliding_window":
            raise ValueError(
                f"`sliding_window` is not supported by {family}: {self.sliding_window_refusal}. Leave it None, "
                f"got {value!r}."
            )
        raise ValueError(
            f"`{name}` is not supported by {family} (only the hflm_gpt, hflm_t5 and hflm_bart families "
            f"implement mixture-of-experts): leave it 0, got {value!r}."
        )

    def validate_hflm(self) -> None:
        """Raise `ValueError` naming the field for every invalid value or contradictory combination.

        Run at construction and again when a model is built from the config (`HfLmPreTrainedModel`),
        which catches values set after construction.
        """
        for name in (
            *self._base_sizes,
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "max_position_embeddings",
        ):
            _positive_int(name, getattr(self, name))
        if (
            self.num_key_value_heads > self.num_attention_heads
            or self.num_attention_heads % self.num_key_value_heads
        ):
            raise ValueError(
                f"`num_key_value_heads` ({self.num_key_value_heads}) must divide `num_attention_heads` "
                f"({self.num_attention_heads}): use {self.num_attention_heads} for MHA, 1 for MQA, a divisor for GQA."
            )
        # another family's field set on this config after construction (`config.sliding_window = 4`)
        for name in _REFUSED_IF_SET:
            if name not in self.__dataclass_fields__ and name not in self.attribute_map:
                self._refuse_other_family_field(name, self.__dict__.get(name, OTHER_FAMILY_FIELDS[name][0]))
        _choice("hidden_act", self.hidden_act, FEED_FORWARD_NAMES)
        _choice("position_embedding_type", self.position_embedding_type, POSITION_ENCODING_NAMES)
        _choice("norm_type", self.norm_type, NORM_NAMES)
        _choice("norm_position", self.norm_position, NORM_POSITIONS)
        if self.position_embedding_type in ("rope", "xpos") and self.head_dim % 2:
            raise ValueError(
                f"`head_dim` must be even for position_embedding_type='{self.position_embedding_type}', got {self.head_dim}."
            )
        if self.position_embedding_type == "xpos" and self.has_bidirectional_stack:
            raise ValueError(
                f"`position_embedding_type`='xpos' is for causal stacks (hflm_gpt): its decay grows for keys "
                f"after the query, so {self.model_type or type(self).__name__}'s encoder cannot use it."
            )
        self._validate_albert_options()
        # absolute positions are added to the token embeddings, at width E
        width_name = "hidden_size" if self.embedding_size in (None, self.hidden_size) else "embedding_size"
        if self.position_embedding_type == "sinusoidal" and getattr(self, width_name) % 2:
            raise ValueError(
                f"`{width_name}` must be even for position_embedding_type='sinusoidal', got {getattr(self, width_name)}."
            )
        self._validate_relative_buckets()
        if self.attention_scale is not None:  # None: 1/sqrt(head_dim)
            _positive("attention_scale", self.attention_scale)
        _positive("rope_theta", self.rope_theta)
        # any finite positive epsilon is valid: 1.0 is unusual, not wrong (transformers accepts it)
        _positive("norm_eps", self.norm_eps)
        _non_negative("initializer_range", self.initializer_range)
        _dropout("hidden_dropout", self.hidden_dropout)
        _dropout("attention_dropout", self.attention_dropout)
        for name in ("attention_bias", "mlp_bias", "tie_word_embeddings", "use_cache"):
            _bool(name, getattr(self, name))
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            _token_ids(name, getattr(self, name), self.vocab_size)
        self._validate_attention_pattern()

    def _validate_relative_buckets(self) -> None:
        """T5's buckets (`relative_position_bucket`): what its formula needs, nothing more.

        Half of a direction's buckets hold the exact distances below `max_exact`; the log-spaced ones
        divide by log(max_distance / max_exact), so there must be an exact bucket (max_exact >= 1) and
        `relative_attention_max_distance` must exceed max_exact (else the bucket index is nan or negative).
        """
        for name in ("relative_attention_num_buckets", "relative_attention_max_distance"):
            _positive_int(name, getattr(self, name))
        if self.position_embedding_type != "relative_buckets":
            return
        # a bidirectional stack spends half of the buckets on each direction
        per_direction = self.relative_attention_num_buckets // (2 if self.has_bidirectional_stack else 1)
        max_exact = per_direction // 2
        if max_exact < 1:
            least = 4 if self.has_bidirectional_stack else 2
            raise ValueError(
                f"`relative_attention_num_buckets` must be at least {least} for {self.model_type or type(self).__name__} "
                f"(half of each direction's buckets hold exact distances), got {self.relative_attention_num_buckets}."
            )
        if self.relative_attention_max_distance <= max_exact:
            raise ValueError(
                f"`relative_attention_max_distance` ({self.relative_attention_max_distance}) must exceed the "
                f"{max_exact} exact distances of relative_attention_num_buckets={self.relative_attention_num_buckets}: "
                "the log-spaced buckets cover the distances between them."
            )

    def _validate_attention_pattern(self) -> None:
        _attention_pattern("attention_pattern", self.attention_pattern)
        for name in (
            "attention_window",
            "attention_dilation",
            "num_global_tokens",
            "attention_block_size",
            "num_random_keys",
        ):
            _positive_int(name, getattr(self, name))
        seed = self.attention_random_seed
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"`attention_random_seed` must be a non-negative integer, got {seed!r}.")

    def _validate_albert_options(self) -> None:
        if not self.supports_albert_options:
            # T5 and BART do not implement them: accept only the values that change nothing
            for name, neutral in (
                ("embedding_size", self.hidden_size),
                ("num_hidden_groups", self.num_hidden_layers),
            ):
                if getattr(self, name) not in (None, neutral):
                    raise ValueError(
                        f"`{name}` is not supported by {self.model_type or type(self).__name__} (only the "
                        f"hflm_gpt and hflm_bert families implement it): leave it None, got {getattr(self, name)!r}."
                    )
            return
        _positive_int("embedding_size", self.embedding_size)
        _positive_int("num_hidden_groups", self.num_hidden_groups)
        if self.num_hidden_groups > self.num_hidden_layers:
            raise ValueError(
                f"`num_hidden_groups` ({self.num_hidden_groups}) cannot exceed `num_hidden_layers` "
                f"({self.num_hidden_layers}): it is the number of distinct blocks the layers share."
            )

    # ------------------------------------------------------------------------------------------
    # The parameter count, estimated from the fields (`HfLmPreTrainedModel` refuses a config whose
    # model cannot fit in memory before building it)
    # ------------------------------------------------------------------------------------------

    def estimated_num_parameters(self) -> int:
        """A lower bound of the parameter count of this config's models (biases, norms and heads
        aside): the token embeddings and the distinct blocks of every stack."""
        C, V = self.hidden_size, self.vocab_size
        E = self.embedding_size or C
        blocks = self.num_hidden_groups or self.num_hidden_layers
        return V * E + (E * C if E != C else 0) + blocks * self._block_parameters(sparse=False)

    def _block_parameters(self, sparse: bool, cross_attention: bool = False) -> int:
        """The weight matrices of one block: self-attention (+ cross-attention) and the feed-forward
        (`num_local_experts` of them and a router in a sparse layer)."""
        C, q, kv = (
            self.hidden_size,
            self.num_attention_heads * self.head_dim,
            self.num_key_value_heads * self.head_dim,
        )
        attention = 2 * C * q + 2 * C * kv  # q, o and k, v projections
        ff = (3 if self.hidden_act in GATED_FEED_FORWARDS else 2) * C * self.intermediate_size
        experts = getattr(self, "num_local_experts", 0) if sparse else 0
        return attention * (2 if cross_attention else 1) + (ff * experts + C * experts if experts else ff)

    def stack_tp_plan(
        self, layers: str, sparse_step: int | None = None, cross_attention: bool = False
    ) -> dict:
        """The tensor-parallel plan (transformers' styles, `from_pretrained(tp_plan="auto")`) of the blocks
        of one stack, `layers` its path ("layers", "decoder.layers"), as Llama's `base_model_tp_plan`.

        Megatron-LM's split (Shoeybi et al., 2019): every projection into heads or the feed-forward's
        width is sharded on its output ("colwise"), every projection back to the model width on its
        input ("rowwise", whose outputs are summed), so a block exchanges data twice. `query_key_value`
        is grouped by key/value head (`hflm_attention.Attention`), so a plain split gives each process
        whole groups; the stacked halves of `gate_up_proj` and of cross-attention's `kv_proj` are
        split each on its own ("packed_colwise", or with a bias hf_lm's "hflm_packed_colwise", which
        splits the bias alike: `hflm_attention.PACKED_COLWISE_WITH_BIAS`). A mixture of experts shards every expert alike; its
        router is replicated, so every process routes the same tokens. Embeddings are sharded on the
        vocabulary (transformers adds "embed_tokens"), norms and position tables replicated."""

        def packed(bias: bool) -> str:
            # transformers' "packed_colwise" splits a bias in one piece: hf_lm's style splits it as the weight
            return "hflm_packed_colwise" if bias else "packed_colwise"

        gated = self.hidden_act in GATED_FEED_FORWARDS
        ff = {"gate_up_proj": packed(self.mlp_bias)} if gated else {"up_proj": "colwise"}
        ff["down_proj"] = "rowwise"
        plan = {f"{layers}.*.self_attn.query_key_value": "colwise", f"{layers}.*.self_attn.o_proj": "rowwise"}
        if cross_attention:
            kv = packed(self.attention_bias)
            for name, style in (("q_proj", "colwise"), ("kv_proj", kv), ("o_proj", "rowwise")):
                plan[f"{layers}.*.cross_attn.{name}"] = style
        experts = getattr(self, "num_local_experts", 0)
        # which feed-forwards exist: dense ones unless every layer is sparse, experts in sparse ones
        owners = (["mlp"] if not experts or sparse_step != 1 else []) + (["mlp.experts.*"] if experts else [])
        for owner in owners:
            plan.update({f"{layers}.*.{owner}.{name}": style for name, style in ff.items()})
        return plan


class HfLmMoETransformerConfig(HfLmTransformerConfig):
    """The shared Transformer fields plus the mixture-of-experts fields, for the families whose heads
    implement them (GPT, T5, BART; not registered itself).

    Args:
        num_local_experts: 0 (the default) = dense feed-forwards; E > 0 = a mixture of E experts
            (each a `hidden_act` feed-forward) in the sparse layers (Shazeer et al., 2017; Fedus
            et al., 2021). The MoE fields below (Mixtral's and SwitchTransformers' names) apply then.
        num_experts_per_tok: k, the experts each token is routed to (2: Mixtral/GShard, 1: Switch);
            `None` = 2 with experts, and stays None in a dense config.
        expert_capacity: the most tokens an expert takes per sequence; overflowing tokens are
            dropped (their feed-forward output is 0: they pass through the residual).
        capacity_factor: instead of `expert_capacity`, a capacity of
            `ceil(capacity_factor * tokens * k / E)` per sequence (Switch's capacity factor). Neither
            set: no token is ever dropped.
        norm_topk_prob: rescale the k chosen router probabilities to sum to 1 (Mixtral, Shazeer's
            softmax over the top k); False weights each expert by its raw probability (Switch top-1).
        noisy_gating: Shazeer et al.'s noisy top-k gating: in training, add Gaussian noise scaled by a
            learned softplus(x W_noise) to the router logits.
        router_jitter_noise: multiplicative uniform jitter in [1-eps, 1+eps] on the router's input
            in training (Switch).
        router_aux_loss_coef: weight of the load-balancing loss added to the loss when labels are given;
            `None` = 0.001 with experts (Mixtral's and Switch's), 0.0 in a dense config. Why the dense
            values: TRL and other tools take `num_experts_per_tok` and a non-zero
            `router_aux_loss_coef` as the marks of a mixture of experts.
        router_z_loss_coef: weight of the router z-loss (Zoph et al., 2022), mean logsumexp(logits)^2.
        output_router_logits: return the router logits of every sparse layer (`router_logits`).
        decoder_sparse_step: which layers of the decoder stack (GPT's one stack) are sparse,
            SwitchTransformers' rule: every layer for 1, else layers i with `i % step == 1` (2: every
            other layer, starting with the second). T5/BART add `encoder_sparse_step`.
    """

    # Mixtral's alias of the expert count, and the experts' width (each expert is an
    # `intermediate_size` feed-forward), under the names tools such as TRL read
    attribute_map = {"num_experts": "num_local_experts", "moe_intermediate_size": "intermediate_size"}

    num_local_experts: int = 0
    num_experts_per_tok: int | None = None
    expert_capacity: int | None = None
    capacity_factor: float | None = None
    norm_topk_prob: bool = True
    noisy_gating: bool = False
    router_jitter_noise: float = 0.0
    router_aux_loss_coef: float | None = None
    router_z_loss_coef: float = 0.0
    output_router_logits: bool = False
    decoder_sparse_step: int = 1

    def __post_init__(self, **kwargs):
        self._resolve_moe_defaults()
        super().__post_init__(**kwargs)

    def validate_hflm(self) -> None:
        super().validate_hflm()
        self._validate_moe_options()

    def _resolve_moe_defaults(self) -> None:
        """Fill `num_experts_per_tok` and `router_aux_loss_coef` left None (see the class docstring)."""
        moe = isinstance(self.num_local_experts, int) and self.num_local_experts > 0
        if self.num_experts_per_tok is None and moe:
            self.num_experts_per_tok = 2
        if self.router_aux_loss_coef is None:
            self.router_aux_loss_coef = 0.001 if moe else 0.0

    def _sparse_step_fields(self) -> tuple[str, ...]:
        return ("decoder_sparse_step",)

    def _validate_moe_options(self) -> None:
        """The mixture-of-experts fields (`num_local_experts` > 0), see the class docstring."""
        self._resolve_moe_defaults()  # experts may have been switched on after construction
        if isinstance(self.num_local_experts, bool) or not isinstance(self.num_local_experts, int):
            raise ValueError(f"`num_local_experts` must be an integer >= 0, got {self.num_local_experts!r}.")
        _non_negative("num_local_experts", self.num_local_experts)
        if self.num_experts_per_tok is not None:
            _positive_int("num_experts_per_tok", self.num_experts_per_tok)
        if self.num_local_experts and self.num_experts_per_tok > self.num_local_experts:
            raise ValueError(
                f"`num_experts_per_tok` ({self.num_experts_per_tok}) cannot exceed `num_local_experts` "
                f"({self.num_local_experts})."
            )
        if self.expert_capacity is not None:
            _positive_int("expert_capacity", self.expert_capacity)
        if self.capacity_factor is not None:
            _positive("capacity_factor", self.capacity_factor)
            if self.expert_capacity is not None:
                raise ValueError(
                    "Set one of `expert_capacity` (tokens per expert) and `capacity_factor` (relative), not both."
                )
        for name in self._sparse_step_fields():
            _positive_int(name, getattr(self, name))
        for name in ("norm_topk_prob", "noisy_gating", "output_router_logits"):
            _bool(name, getattr(self, name))
        # the jitter factor is uniform in [1 - eps, 1 + eps]: any finite eps >= 0 is defined
        _non_negative("router_jitter_noise", self.router_jitter_noise)
        _non_negative("router_aux_loss_coef", self.router_aux_loss_coef)
        _non_negative("router_z_loss_coef", self.router_z_loss_coef)

    def _num_sparse_layers(self, num_layers: int, step: int) -> int:
        """How many of `num_layers` layers are sparse under SwitchTransformers' rule (`is_sparse_layer`)."""
        if not self.num_local_experts:
            return 0
        return num_layers if step == 1 else len(range(1, num_layers, step))

    def estimated_num_parameters(self) -> int:
        if not self.num_local_experts:
            return super().estimated_num_parameters()
        blocks = self.num_hidden_groups or self.num_hidden_layers  # the distinct blocks are built
        sparse = self._num_sparse_layers(blocks, self.decoder_sparse_step)
        return super().estimated_num_parameters() + sparse * (
            self._block_parameters(sparse=True) - self._block_parameters(sparse=False)
        )

    def size_fields(self) -> dict:
        fields = super().size_fields()
        if self.num_local_experts:
            fields["num_local_experts"] = self.num_local_experts
        return fields
