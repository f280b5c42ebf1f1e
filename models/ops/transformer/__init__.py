"""The transformer family's own ops (GPT-2, BERT, ViT): learned position embeddings,
ViT's patch embedding, multi-head self-attention and the class-token read-out. LayerNorm,
GELU and Dense over a sequence are general ops (models/ops/layer_norm.py, activation.py,
dense.py)."""
