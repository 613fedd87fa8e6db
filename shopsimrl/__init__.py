"""ShopSimRL: GRPO training of LLM shopping agents with a skill curriculum."""

__version__ = "0.1.0"
