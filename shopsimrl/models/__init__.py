"""Models of the local backend: a tiny in-process model for tests and the SmolLM2 demo default."""

from shopsimrl.models.tiny import IM_END, IM_START, tiny_model, tiny_tokenizer

__all__ = ["IM_END", "IM_START", "tiny_model", "tiny_tokenizer"]
