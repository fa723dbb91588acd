"""The configuration fields every hf_lm Transformer family shares, validated once at construction.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from .hflm_common import (
    FEED_FORWARD_NAMES,
    NORM_NAMES,
    NORM_POSITIONS,
    POSITION_ENCODING_NAMES,
    _attention_pattern,
    _bool,
    _choice,
    _non_negative,
    _number,
    _positive,
    _positive_int,
    _probability,
    _token_ids,
    installed_pipelines_dropped,
)


class HfLmTransformerConfig(PreTrainedConfig):
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
        xpos_scale_base: xPos's scale base: the decay of a score is zeta^(distance / xpos_scale_base)
            (Sun et al., 2022, use 512).
        relative_attention_num_buckets, relative_attention_max_distance: T5's bucketed relative
            position bias (`position_embedding_type="relative_buckets"`).
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
            Mistral's `sliding_window` is w + 1, Longformer's `attention_window` 2w).
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
        encoder_sparse_step, decoder_sparse_step: which layers of the encoder / decoder (GPT: the
            decoder) stack are sparse, SwitchTransformers' rule: every layer for 1, else layers i with
            `i % step == 1` (2: every other layer, starting with the second).

    The ALBERT options are implemented by the families that set `supports_albert_options` (GPT, BERT);
    the others refuse values other than the defaults rather than silently ignoring them.
    """

    # Mixtral's alias of the expert count, and the experts' width (each expert is an
    # `intermediate_size` feed-forward), under the names tools such as TRL read
    attribute_map = {"num_experts": "num_local_experts", "moe_intermediate_size": "intermediate_size"}
    # whether the family implements `embedding_size` and `num_hidden_groups` (a class attribute, not a field)
    supports_albert_options = False
    # whether the family's heads implement the mixture-of-experts fields (their losses and outputs)
    supports_moe = False
    # whether the family runs a bidirectional stack (an encoder), which xPos's one-sided decay cannot serve
    has_bidirectional_stack = True
    # whether the family's cached self-attention follows `attention_pattern` (GPT's does; T5/BART
    # apply it to their encoder only, BERT keeps no cache): a class attribute, not a field
    attention_pattern_in_cache = False
    # the sizes the derived fields are computed from (class attributes, not fields)
    _base_sizes = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")

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
    xpos_scale_base: int = 512
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
    encoder_sparse_step: int = 1
    decoder_sparse_step: int = 1
    attention_pattern: str = "dense"
    attention_window: int = 128
    attention_dilation: int = 2
    num_global_tokens: int = 1
    attention_block_size: int = 64
    num_random_keys: int = 3
    attention_random_seed: int = 0

    def __post_init__(self, **kwargs):
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
        self._resolve_moe_defaults()
        if self.supports_albert_options:
            if self.embedding_size is None:
                self.embedding_size = self.hidden_size
            if self.num_hidden_groups is None:
                self.num_hidden_groups = self.num_hidden_layers
        super().__post_init__(**installed_pipelines_dropped(type(self), kwargs))
        self.validate_hflm()

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
        _choice("hidden_act", self.hidden_act, FEED_FORWARD_NAMES)
        _choice("position_embedding_type", self.position_embedding_type, POSITION_ENCODING_NAMES)
        _choice("norm_type", self.norm_type, NORM_NAMES)
        _choice("norm_position", self.norm_position, NORM_POSITIONS)
        if self.position_embedding_type in ("rope", "xpos") and self.head_dim % 2:
            raise ValueError(
                f"`head_dim` must be even for position_embedding_type='{self.position_embedding_type}', got {self.head_dim}."
            )
        _positive_int("xpos_scale_base", self.xpos_scale_base)
        if self.position_embedding_type == "xpos" and self.has_bidirectional_stack:
            raise ValueError(
                f"`position_embedding_type`='xpos' is for causal stacks (hflm_gpt): its decay grows for keys "
                f"after the query, so {self.model_type or type(self).__name__}'s encoder cannot use it."
            )
        self._validate_albert_options()
        self._validate_moe_options()
        # absolute positions are added to the token embeddings, at width E
        width_name = "hidden_size" if self.embedding_size in (None, self.hidden_size) else "embedding_size"
        if self.position_embedding_type == "sinusoidal" and getattr(self, width_name) % 2:
            raise ValueError(
                f"`{width_name}` must be even for position_embedding_type='sinusoidal', got {getattr(self, width_name)}."
            )
        for name in ("relative_attention_num_buckets", "relative_attention_max_distance"):
            _positive_int(name, getattr(self, name))
        if self.relative_attention_num_buckets < 4:
            raise ValueError(
                f"`relative_attention_num_buckets` must be at least 4, got {self.relative_attention_num_buckets}."
            )
        if self.attention_scale is not None:  # None: 1/sqrt(head_dim)
            _positive("attention_scale", self.attention_scale)
        _positive("rope_theta", self.rope_theta)
        _number("norm_eps", self.norm_eps, 0, 1, low_open=True, high_open=True)
        _non_negative("initializer_range", self.initializer_range)
        _probability("hidden_dropout", self.hidden_dropout)
        _probability("attention_dropout", self.attention_dropout)
        for name in ("attention_bias", "mlp_bias", "tie_word_embeddings", "use_cache"):
            _bool(name, getattr(self, name))
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            _token_ids(name, getattr(self, name), self.vocab_size)
        self._validate_attention_pattern()

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

    @property
    def sliding_window(self) -> int | None:
        """How many of the latest keys a decoding step can attend to, or None when it may need any.

        Derived, not stored: Mistral's name, which transformers' `DynamicCache(config=...)` and
        `StaticCache(config=...)` (what `generate()` makes) read to build sliding-window layers
        that keep only those keys. Bounded when every part of a cached `attention_pattern` is
        local: "band" reaches w keys back, "dilated" w * d, "block" b - 1; "global" and "random"
        keys may lie anywhere before.
        """
        reach = {
            "band": self.attention_window,
            "dilated": self.attention_window * self.attention_dilation,
            "block": self.attention_block_size - 1,
        }
        parts = _attention_pattern("attention_pattern", self.attention_pattern)
        if not self.attention_pattern_in_cache or not parts or not set(parts) <= set(reach):
            return None
        return max(reach[part] for part in parts) + 1

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

    def _resolve_moe_defaults(self) -> None:
        """Fill `num_experts_per_tok` and `router_aux_loss_coef` left None (see the class docstring)."""
        moe = isinstance(self.num_local_experts, int) and self.num_local_experts > 0
        if self.num_experts_per_tok is None and moe:
            self.num_experts_per_tok = 2
        if self.router_aux_loss_coef is None:
            self.router_aux_loss_coef = 0.001 if moe else 0.0

    def _validate_moe_options(self) -> None:
        """The mixture-of-experts fields (`num_local_experts` > 0), see the class docstring."""
        self._resolve_moe_defaults()  # experts may have been switched on after construction
        if isinstance(self.num_local_experts, bool) or not isinstance(self.num_local_experts, int):
            raise ValueError(f"`num_local_experts` must be an integer >= 0, got {self.num_local_experts!r}.")
        _non_negative("num_local_experts", self.num_local_experts)
        if self.num_local_experts and not self.supports_moe:
            raise ValueError(
                f"`num_local_experts` is not supported by {self.model_type or type(self).__name__} (only the "
                f"hflm_gpt, hflm_t5 and hflm_bart families implement mixture-of-experts): leave it 0, "
                f"got {self.num_local_experts!r}."
            )
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
        for name in ("encoder_sparse_step", "decoder_sparse_step"):
            _positive_int(name, getattr(self, name))
        for name in ("norm_topk_prob", "noisy_gating", "output_router_logits"):
            _bool(name, getattr(self, name))
        _probability("router_jitter_noise", self.router_jitter_noise)
        _non_negative("router_aux_loss_coef", self.router_aux_loss_coef)
        _non_negative("router_z_loss_coef", self.router_z_loss_coef)
