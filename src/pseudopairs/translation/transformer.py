"""A small pre-norm Transformer encoder–decoder whose parameters are named like OpenNMT-py's.

The demo world has no published translation model, so ``pseudopairs train-mt`` trains this one.
Every module, parameter and buffer carries the name OpenNMT-py (2.x/3.x) gives it, so
:func:`opennmt_checkpoint` can write a checkpoint that CTranslate2's OpenNMT-py converter reads
exactly like a published OpenNMT-py model (``ctranslate2/converters/opennmt_py.py``):

- ``{encoder,decoder}.embeddings.make_embedding.emb_luts.0.weight``: token embeddings, scaled by
  ``sqrt(d_model)`` before the sinusoidal table ``….make_embedding.pe.pe`` (shape
  ``(max_len, 1, d_model)``) is added;
- ``encoder.transformer.{i}.{self_attn,feed_forward,layer_norm}`` and
  ``decoder.transformer_layers.{i}.{self_attn,context_attn,feed_forward,layer_norm_1,layer_norm_2}``;
  attention projections ``linear_query``, ``linear_keys``, ``linear_values``, ``final_linear``;
  the feed-forward block ``w_1`` → ReLU → ``w_2`` with its own pre-norm ``layer_norm``;
- final ``encoder.layer_norm`` / ``decoder.layer_norm``; the ``generator`` (a linear layer) is
  stored apart, as OpenNMT-py does.

The layer arithmetic is the pre-norm Transformer both OpenNMT-py and CTranslate2 implement
(``x + Attn(LN(x))``, then ``x + FFN(LN(x))``). Layer norms use ``eps = 1e-5``: CTranslate2
applies that value to every OpenNMT-py model with biased layer norms (the converter records no
epsilon), so this model computes exactly what the converted one does.

Token conventions (OpenNMT-py's): vocabulary ``<unk>, <blank>, <s>, </s>, pieces…``; the source
gets no BOS/EOS; the decoder input starts with ``<s>`` and the target ends with ``</s>``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

UNK, PAD, BOS, EOS = "<unk>", "<blank>", "<s>", "</s>"
SPECIALS = (UNK, PAD, BOS, EOS)
UNK_ID, PAD_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
#: rows of the sinusoidal position table (OpenNMT-py's default ``max_len``)
MAX_POSITIONS = 5000
LAYER_NORM_EPS = 1e-5


@dataclass(frozen=True)
class TransformerShape:
    """Architecture of :class:`Seq2SeqTransformer` (from ``translation.train`` settings or a
    checkpoint's options; no defaults of its own)."""

    src_vocab: int
    tgt_vocab: int
    enc_layers: int
    dec_layers: int
    d_model: int
    heads: int
    ff: int
    dropout: float
    attention_dropout: float


def sinusoid_table(max_len: int, dim: int) -> torch.Tensor:
    """The Transformer position table, ``(max_len, 1, dim)``: sine on even, cosine on odd
    channels, wavelengths ``10000^(2i/dim)`` (OpenNMT-py 2.x layout)."""
    if dim % 2:
        raise ValueError(f"d_model must be even for sinusoidal positions, got {dim}")
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_len, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table.unsqueeze(1)


class _PositionTable(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("pe", sinusoid_table(MAX_POSITIONS, dim))


class _MakeEmbedding(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.emb_luts = nn.ModuleList([nn.Embedding(vocab, dim, padding_idx=PAD_ID)])
        self.pe = _PositionTable(dim)


class Embeddings(nn.Module):
    """Token embedding × sqrt(d) + position encoding, then dropout."""

    def __init__(self, vocab: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.dim = dim
        self.make_embedding = _MakeEmbedding(vocab, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.size(1)
        if length > MAX_POSITIONS:
            raise ValueError(f"sequence of {length} tokens exceeds the position table ({MAX_POSITIONS})")
        emb = self.make_embedding.emb_luts[0](ids) * math.sqrt(self.dim)
        emb = emb + self.make_embedding.pe.pe[:length, 0].unsqueeze(0)
        return self.dropout(emb)


class MultiHeadedAttention(nn.Module):
    """Scaled dot-product attention with separate query/key/value projections."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"d_model ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        self.dropout = dropout
        self.linear_keys = nn.Linear(dim, dim)
        self.linear_values = nn.Linear(dim, dim)
        self.linear_query = nn.Linear(dim, dim)
        self.final_linear = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return x.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)

    def forward(self, query: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``allowed``: bool, broadcastable to ``(B, 1, Tq, Tk)``; True where attention may look."""
        q = self._split(self.linear_query(query))
        k = self._split(self.linear_keys(memory))
        v = self._split(self.linear_values(memory))
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, dropout_p=self.dropout if self.training else 0.0)
        batch, _, length, _ = context.shape
        return self.final_linear(context.transpose(1, 2).reshape(batch, length, -1))


class PositionwiseFeedForward(nn.Module):
    """``x + W2 · dropout(ReLU(W1 · LN(x)))`` (OpenNMT-py keeps the residual inside)."""

    def __init__(self, dim: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.w_1 = nn.Linear(dim, ff)
        self.w_2 = nn.Linear(ff, dim)
        self.layer_norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.dropout_1 = nn.Dropout(dropout)
        self.dropout_2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inter = self.dropout_1(F.relu(self.w_1(self.layer_norm(x))))
        return x + self.dropout_2(self.w_2(inter))


class EncoderLayer(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.self_attn = MultiHeadedAttention(shape.d_model, shape.heads, shape.attention_dropout)
        self.feed_forward = PositionwiseFeedForward(shape.d_model, shape.ff, shape.dropout)
        self.layer_norm = nn.LayerNorm(shape.d_model, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(shape.dropout)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        normed = self.layer_norm(x)
        x = x + self.dropout(self.self_attn(normed, normed, allowed))
        return self.feed_forward(x)


class DecoderLayer(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.self_attn = MultiHeadedAttention(shape.d_model, shape.heads, shape.attention_dropout)
        self.context_attn = MultiHeadedAttention(shape.d_model, shape.heads, shape.attention_dropout)
        self.feed_forward = PositionwiseFeedForward(shape.d_model, shape.ff, shape.dropout)
        self.layer_norm_1 = nn.LayerNorm(shape.d_model, eps=LAYER_NORM_EPS)
        self.layer_norm_2 = nn.LayerNorm(shape.d_model, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(shape.dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_allowed: torch.Tensor,
                src_allowed: torch.Tensor) -> torch.Tensor:
        normed = self.layer_norm_1(x)
        x = x + self.dropout(self.self_attn(normed, normed, self_allowed))
        normed = self.layer_norm_2(x)
        x = x + self.dropout(self.context_attn(normed, memory, src_allowed))
        return self.feed_forward(x)


class TransformerEncoder(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.embeddings = Embeddings(shape.src_vocab, shape.d_model, shape.dropout)
        self.transformer = nn.ModuleList([EncoderLayer(shape) for _ in range(shape.enc_layers)])
        self.layer_norm = nn.LayerNorm(shape.d_model, eps=LAYER_NORM_EPS)

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the memory ``(B, S, d)`` and the key mask ``(B, 1, 1, S)`` (True = real token)."""
        allowed = (src != PAD_ID)[:, None, None, :]
        x = self.embeddings(src)
        for layer in self.transformer:
            x = layer(x, allowed)
        return self.layer_norm(x), allowed


class TransformerDecoder(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.embeddings = Embeddings(shape.tgt_vocab, shape.d_model, shape.dropout)
        self.transformer_layers = nn.ModuleList([DecoderLayer(shape) for _ in range(shape.dec_layers)])
        self.layer_norm = nn.LayerNorm(shape.d_model, eps=LAYER_NORM_EPS)

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_allowed: torch.Tensor) -> torch.Tensor:
        length = tgt_in.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt_in.device).tril()
        self_allowed = causal[None, None] & (tgt_in != PAD_ID)[:, None, None, :]
        x = self.embeddings(tgt_in)
        for layer in self.transformer_layers:
            x = layer(x, memory, self_allowed, src_allowed)
        return self.layer_norm(x)


class Seq2SeqTransformer(nn.Module):
    """Encoder, decoder and generator; :meth:`forward` returns target logits ``(B, T, V)``."""

    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.shape = shape
        self.encoder = TransformerEncoder(shape)
        self.decoder = TransformerDecoder(shape)
        self.generator = nn.Linear(shape.d_model, shape.tgt_vocab)
        self._init_weights()

    def _init_weights(self) -> None:
        # Xavier-uniform for matrices (OpenNMT-py's -param_init_glorot), zero biases; the padding
        # embedding row stays zero.
        for name, param in self.named_parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)
            elif name.endswith("bias"):
                nn.init.zeros_(param)
        with torch.no_grad():
            for emb in (self.encoder.embeddings, self.decoder.embeddings):
                emb.make_embedding.emb_luts[0].weight[PAD_ID].zero_()

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, src_allowed = self.encoder(src)
        return self.generator(self.decoder(tgt_in, memory, src_allowed))

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, *, max_length: int = 256, min_length: int = 1) -> list[list[int]]:
        """Greedy search as CTranslate2 does it with ``beam_size=1``: start from ``<s>``, take the
        arg-max of the log-probabilities, forbid ``</s>`` before ``min_length`` tokens, stop at
        ``</s>`` (not returned) or after ``max_length`` tokens. ``src``: padded ids ``(B, S)``."""
        was_training = self.training
        self.eval()
        try:
            memory, src_allowed = self.encoder(src)
            batch = src.size(0)
            ys = torch.full((batch, 1), BOS_ID, dtype=torch.long, device=src.device)
            done = torch.zeros(batch, dtype=torch.bool, device=src.device)
            outputs: list[list[int]] = [[] for _ in range(batch)]
            for step in range(max_length):
                logits = self.generator(self.decoder(ys, memory, src_allowed)[:, -1])
                logprobs = F.log_softmax(logits.float(), dim=-1)
                if step < min_length:
                    logprobs[:, EOS_ID] = -math.inf
                best = logprobs.argmax(dim=-1)
                for i in range(batch):
                    if not done[i] and int(best[i]) != EOS_ID:
                        outputs[i].append(int(best[i]))
                done = done | (best == EOS_ID)
                if bool(done.all()):
                    break
                ys = torch.cat([ys, torch.where(done, torch.full_like(best, PAD_ID), best)[:, None]], dim=1)
            return outputs
        finally:
            self.train(was_training)


# --------------------------------------------------------------------------------------------
# The OpenNMT-py checkpoint layout
# --------------------------------------------------------------------------------------------


def opennmt_opt(shape: TransformerShape, **extra) -> argparse.Namespace:
    """The ``opt`` namespace of an OpenNMT-py Transformer checkpoint for ``shape`` (the fields the
    CTranslate2 converter reads, plus the usual size fields for human readers)."""
    return argparse.Namespace(
        model_type="text",
        encoder_type="transformer",
        decoder_type="transformer",
        enc_layers=shape.enc_layers,
        dec_layers=shape.dec_layers,
        heads=shape.heads,
        hidden_size=shape.d_model,
        rnn_size=shape.d_model,
        word_vec_size=shape.d_model,
        src_word_vec_size=shape.d_model,
        tgt_word_vec_size=shape.d_model,
        transformer_ff=shape.ff,
        dropout=[shape.dropout],
        attention_dropout=[shape.attention_dropout],
        position_encoding=True,
        max_relative_positions=0,
        self_attn_type="scaled-dot",
        pos_ffn_activation_fn="relu",
        feat_merge="concat",
        lambda_align=0.0,
        share_embeddings=False,
        share_decoder_embeddings=False,
        decoder_start_token=BOS,
        **extra,
    )


def opennmt_checkpoint(model: Seq2SeqTransformer, *, src_vocab: list[str], tgt_vocab: list[str],
                       extra: dict | None = None) -> dict:
    """The checkpoint dict OpenNMT-py 3.x writes: ``model`` (state dict without the generator),
    ``generator``, ``vocab`` (``{"src": [...], "tgt": [...]}``), ``opt`` (a Namespace).
    ``extra`` (plain JSON-able values) is stored under ``"pseudopairs"``; converters ignore it."""
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    generator = {k[len("generator."):]: v for k, v in state.items() if k.startswith("generator.")}
    body = {k: v for k, v in state.items() if not k.startswith("generator.")}
    checkpoint = {
        "model": body,
        "generator": generator,
        "vocab": {"src": list(src_vocab), "tgt": list(tgt_vocab), "decoder_start_token": BOS},
        "opt": opennmt_opt(model.shape),
    }
    if extra is not None:
        checkpoint["pseudopairs"] = extra
    return checkpoint


def load_opennmt_checkpoint(path) -> dict:
    """Read a checkpoint written by :func:`opennmt_checkpoint` (weights-only unpickling; the
    ``opt`` Namespace is the one non-tensor class allowed)."""
    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(path, map_location="cpu", weights_only=True)


def model_from_checkpoint(checkpoint: dict) -> Seq2SeqTransformer:
    """Rebuild :class:`Seq2SeqTransformer` from an OpenNMT-py-layout checkpoint of this module."""
    opt = checkpoint["opt"]
    dropout = opt.dropout[0] if isinstance(opt.dropout, (list, tuple)) else opt.dropout
    attention = opt.attention_dropout
    attention = attention[0] if isinstance(attention, (list, tuple)) else attention
    shape = TransformerShape(
        src_vocab=len(checkpoint["vocab"]["src"]), tgt_vocab=len(checkpoint["vocab"]["tgt"]),
        enc_layers=opt.enc_layers, dec_layers=opt.dec_layers, d_model=opt.hidden_size,
        heads=opt.heads, ff=opt.transformer_ff, dropout=dropout, attention_dropout=attention)
    model = Seq2SeqTransformer(shape)
    state = dict(checkpoint["model"])
    state.update({f"generator.{k}": v for k, v in checkpoint["generator"].items()})
    model.load_state_dict(state, strict=True)
    return model.eval()


# --------------------------------------------------------------------------------------------
# Training pieces (the resumable loop itself: pseudopairs.translation.fit)
# --------------------------------------------------------------------------------------------


def length_batches(src_lengths, tgt_lengths, *, batch_tokens: int, rng) -> list:
    """Index batches for one epoch: pairs sorted by length (random order among equal lengths),
    cut greedily so that ``len(batch) * longest side in the batch <= batch_tokens`` (at least one
    pair per batch), then the batch order shuffled. ``rng``: a ``numpy.random.Generator``."""
    import numpy as np

    longest = np.maximum(np.asarray(src_lengths), np.asarray(tgt_lengths)) + 1  # + <s> or </s>
    order = rng.permutation(len(longest))
    order = order[np.argsort(longest[order], kind="stable")]
    batches, current, width = [], [], 0
    for index in order:
        new_width = max(width, int(longest[index]))
        if current and (len(current) + 1) * new_width > batch_tokens:
            batches.append(np.asarray(current))
            current, new_width = [], int(longest[index])
        current.append(int(index))
        width = new_width
    if current:
        batches.append(np.asarray(current))
    return [batches[i] for i in rng.permutation(len(batches))]


def pad_batch(sequences, *, bos: bool = False, eos: bool = False) -> torch.Tensor:
    """Right-padded id tensor ``(B, T)``, optionally with ``<s>`` first / ``</s>`` last."""
    rows = [([BOS_ID] if bos else []) + list(seq) + ([EOS_ID] if eos else []) for seq in sequences]
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], dtype=torch.long)


def inverse_sqrt_lr(step: int, *, lr: float, warmup_steps: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps`` updates, then ``lr * sqrt(warmup / step)``."""
    step = max(step, 1)
    if warmup_steps <= 0:
        return lr
    return lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))


@torch.no_grad()
def evaluate_nll(model: Seq2SeqTransformer, src_ids, tgt_ids, *, batch_tokens: int) -> float:
    """Mean per-token negative log-likelihood of the targets (``</s>`` included), eval mode."""
    import numpy as np

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    rng = np.random.default_rng(0)
    for batch in length_batches([len(s) for s in src_ids], [len(t) for t in tgt_ids],
                                batch_tokens=batch_tokens, rng=rng):
        src = pad_batch([src_ids[i] for i in batch])
        tgt_in = pad_batch([tgt_ids[i] for i in batch], bos=True)
        tgt_out = pad_batch([tgt_ids[i] for i in batch], eos=True)
        logits = model(src, tgt_in)
        total += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                                       ignore_index=PAD_ID, reduction="sum"))
        count += int((tgt_out != PAD_ID).sum())
    model.train(was_training)
    return total / max(count, 1)


def greedy_translate_ids(model: Seq2SeqTransformer, sources, *, max_length: int = 256,
                         batch_size: int = 64) -> list[list[int]]:
    """Greedy decoding of many id sequences (batched by length, results in input order); an
    empty source gives an empty output."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    outputs: list[list[int]] = [[] for _ in sources]
    todo = [i for i in order if len(sources[i]) > 0]
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        decoded = model.greedy_decode(pad_batch([sources[i] for i in chunk]), max_length=max_length)
        for i, ids in zip(chunk, decoded):
            outputs[i] = ids
    return outputs
