"""GPT-2, BERT and ViT, each as Hugging Face transformers' default config builds it, and
a tiny version of each (2 layers, width 32) for the CPU conformance kit.

* GPT-2 small (Radford et al. 2019; ``GPT2LMHeadModel``, GPT2Config()): decoder-only,
  causal self-attention, learned positions, pre-LN blocks, GELU's tanh form, a final
  LayerNorm and the LM head tied to the token table; context 1024, vocabulary 50257.
* BERT-base (Devlin et al. 2019; ``BertForMaskedLM``, BertConfig()): post-LN encoder,
  GELU's erf form, the padding mask, token-type embedding (one segment), and the MLM head
  (dense, GELU, LayerNorm, decoder tied to the token table with its own bias); 512
  positions, vocabulary 30522, LayerNorm eps 1e-12; 15% of the steps labelled.
  ``bert_base_qa`` is the same encoder under ``BertForQuestionAnswering``'s head (each
  token's start and end logits), the BERT that MLPerf Inference serves.
* ViT-B/16 (Dosovitskiy et al. 2021; ``ViTForImageClassification``, ViTConfig() with
  1000 labels): 16×16 patches of a 224×224 image, class token, learned positions, pre-LN
  encoder, final LayerNorm, a linear classifier on the class token.

Each block's MLP is 4× the width (``intermediate_size`` 3072 for width 768). Dropout is
left out: it is the identity when benchmarking (models/ir.py ``Dropout``).
"""

from __future__ import annotations

from models import ir
from models.layers import dense, softmax

GPT2 = dict(vocab=50257, context=1024, width=768, heads=12, layers=12)
BERT = dict(vocab=30522, context=512, width=768, heads=12, layers=12)
VIT = dict(size=224, patch=16, width=768, heads=12, layers=12, classes=1000)
TINY = dict(width=32, heads=4, layers=2)


def mlp(prefix: str, width: int, gelu: str) -> tuple[ir.Node, ...]:
    return (dense(f"{prefix}.fc", width, 4 * width), ir.Activation(f"{prefix}.gelu", gelu),
            dense(f"{prefix}.proj", 4 * width, width))


def pre_ln_block(prefix: str, width: int, heads: int, causal: bool, gelu: str,
                 eps: float) -> tuple[ir.Node, ...]:
    """x + Attention(LN(x)), then x + MLP(LN(x)) (GPT-2's and ViT's blocks)."""
    return (ir.Residual(f"{prefix}.attn_res", (ir.LayerNorm(f"{prefix}.ln1", width, eps),
                        ir.SelfAttention(f"{prefix}.attn", width, heads, causal=causal))),
            ir.Residual(f"{prefix}.mlp_res", (ir.LayerNorm(f"{prefix}.ln2", width, eps),
                        *mlp(f"{prefix}.mlp", width, gelu))))


def post_ln_block(prefix: str, width: int, heads: int, eps: float) -> tuple[ir.Node, ...]:
    """LN(x + Attention(x)), then LN(x + MLP(x)) (BERT's layers)."""
    return (ir.Residual(f"{prefix}.attn_res",
                        (ir.SelfAttention(f"{prefix}.attn", width, heads, padding=True),)),
            ir.LayerNorm(f"{prefix}.ln1", width, eps),
            ir.Residual(f"{prefix}.mlp_res", mlp(f"{prefix}.mlp", width, "gelu_erf")),
            ir.LayerNorm(f"{prefix}.ln2", width, eps))


def gpt2(vocab: int = GPT2["vocab"], context: int = GPT2["context"], width: int = GPT2["width"],
         heads: int = GPT2["heads"], layers: int = GPT2["layers"], steps: int | None = None,
         name: str = "gpt2") -> ir.Model:
    """``steps``: the sequence length fed (the context by default)."""
    body = (ir.Embedding("wte", vocab, width, init="normal"),
            ir.PositionEmbedding("wpe", context, width),
            *(node for i in range(layers)
              for node in pre_ln_block(f"h{i}", width, heads, True, "gelu_tanh", 1e-5)),
            ir.LayerNorm("ln_f", width, 1e-5),
            ir.TiedDense("lm_head", "wte", bias=False, table=True))
    return ir.Model(name, "transformer",
                    ir.InputSpec("tokens", (steps or context,), vocab, lengths="full"), body,
                    ir.Loss("token_xent", vocab, labelled=1.0),
                    description=f"GPT-2 decoder, {layers} layers, width {width}, causal LM",
                    source="Radford et al. 2019; Hugging Face GPT2LMHeadModel(GPT2Config())",
                    tags=("transformer",))


def bert(vocab: int = BERT["vocab"], context: int = BERT["context"], width: int = BERT["width"],
         heads: int = BERT["heads"], layers: int = BERT["layers"], lengths: str = "full",
         steps: int | None = None, name: str = "bert_base", head: str = "mlm") -> ir.Model:
    """``lengths``: ``full`` sequences (packed MLM text), or ``imdb`` padded ones, which
    exercise the padding mask; ``steps``: the sequence length fed (the context by
    default); ``head``: ``mlm``, BertForMaskedLM's (its answer: 30522 logits a token), or
    ``qa``, BertForQuestionAnswering's ``qa_outputs`` (a Dense of 2: each token's start and
    end logits), the model MLPerf Inference serves (SQuAD v1.1 at 384 tokens)."""
    eps = 1e-12
    encoder = (ir.Embedding("word", vocab, width, init="normal"),
               ir.PositionEmbedding("position", context, width, segments=2),
               ir.LayerNorm("embeddings.ln", width, eps),
               *(node for i in range(layers)
                 for node in post_ln_block(f"layer{i}", width, heads, eps)))
    if head == "qa":
        # The IR has no span loss (SQuAD's: a softmax over positions for the start and one
        # for the end); training is each token's 2-way cross-entropy, the forward is exactly
        # BertForQuestionAnswering's logits.
        top = (dense("qa_outputs", width, 2),)
        loss, task, hf = ir.Loss("token_xent", 2, labelled=1.0), \
            "question answering (start and end logits)", "BertForQuestionAnswering"
    elif head == "mlm":
        top = (dense("mlm.transform", width, width), ir.Activation("mlm.gelu", "gelu_erf"),
               ir.LayerNorm("mlm.ln", width, eps),
               ir.TiedDense("mlm.decoder", "word", bias=True, table=True))
        loss, task, hf = ir.Loss("token_xent", vocab, labelled=0.15), "masked LM", \
            "BertForMaskedLM"
    else:
        raise ValueError(f"unknown BERT head {head!r} (mlm or qa)")
    return ir.Model(name, "transformer",
                    ir.InputSpec("tokens", (steps or context,), vocab, lengths=lengths),
                    (*encoder, *top), loss,
                    description=f"BERT encoder, {layers} layers, width {width}, {task}",
                    source=f"Devlin et al. 2019; Hugging Face {hf}(BertConfig())",
                    tags=("transformer",))


def bert_qa(**kwargs) -> ir.Model:
    return bert(**{"name": "bert_base_qa", **kwargs, "head": "qa"})


def vit(size: int = VIT["size"], patch: int = VIT["patch"], width: int = VIT["width"],
        heads: int = VIT["heads"], layers: int = VIT["layers"], classes: int = VIT["classes"],
        name: str = "vit_b16") -> ir.Model:
    eps = 1e-12
    tokens = (size // patch) ** 2 + 1
    body = (ir.PatchEmbedding("embeddings.patch", 3, width, patch),
            ir.PositionEmbedding("embeddings.position", tokens, width),
            *(node for i in range(layers)
              for node in pre_ln_block(f"layer{i}", width, heads, False, "gelu_erf", eps)),
            ir.LayerNorm("ln", width, eps), ir.FirstToken("class_token"),
            dense("classifier", width, classes))
    return ir.Model(name, "transformer", ir.InputSpec("image", (3, size, size)), body,
                    softmax(classes),
                    description=f"ViT, {patch}×{patch} patches, {layers} layers, width {width}",
                    source="Dosovitskiy et al. 2021; Hugging Face "
                           "ViTForImageClassification(ViTConfig(num_labels=1000))",
                    tags=("transformer",))


def at_length(family: str, steps: int, name: str) -> ir.Model:
    """GPT-2 small (``gpt2``) or BERT-base (``bert_base``, ``bert_base_qa``) fed ``steps`` tokens; a
    position table longer than the default context where the sequence needs it (the
    sequence-length sweep: the same architecture, its table sized to the sequence)."""
    if family == "gpt2":
        return gpt2(context=max(GPT2["context"], steps), steps=steps, name=name)
    head = "qa" if family == "bert_base_qa" else "mlm"
    return bert(context=max(BERT["context"], steps), steps=steps, name=name, head=head)


def gpt2_tiny() -> ir.Model:
    return gpt2(vocab=96, context=16, name="gpt2_tiny", **TINY)


def bert_tiny() -> ir.Model:
    # Padded sequences, so that the padding mask is checked against float64.
    return bert(vocab=96, context=16, lengths="imdb", name="bert_tiny", **TINY)


def vit_tiny() -> ir.Model:
    return vit(size=16, patch=4, classes=10, name="vit_tiny", **TINY)


def not_a_decoder(model: ir.Model) -> str:
    """Why ``model`` cannot generate text with a key/value cache ("" if it can): a
    decoder-only language model is fed tokens, has no frozen prefix, only causal
    self-attention without a padding mask, and ends in a per-token output (the
    ``generate`` measure, suites/serving/generate.py)."""
    nodes = list(ir.walk(model.body))
    attention = [n for n in nodes if isinstance(n, ir.SelfAttention)]
    if model.input.kind != "tokens" or model.frozen:
        return f"{model.name} is not a language model over tokens"
    if not attention or not all(n.causal and not n.padding for n in attention):
        return f"{model.name} is not a decoder-only model (generation needs causal self-attention)"
    if any(isinstance(n, (ir.FirstToken, ir.LSTM, ir.MeanOverTime)) for n in nodes):
        return f"{model.name} does not give a next token per position"
    return ""


def context_length(model: ir.Model) -> int:
    """The most positions ``model`` can attend over: its position table's rows."""
    return min(n.positions for n in ir.walk(model.body) if isinstance(n, ir.PositionEmbedding))
