"""A tiny, real causal LM and tokenizer built in-process, for tests and CPU smoke runs.

Nothing is downloaded. The tokenizer is byte-level (every byte is a token, no merges), so any text
round-trips exactly through encode/decode; it carries the ChatML special tokens that our chat
rendering and slime's Qwen-style prompts use. The model is a randomly initialised LlamaForCausalLM,
small enough that a forward/backward pass over a few thousand tokens takes milliseconds on a CPU.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from shopsimrl.shop.chat_format import IM_END, IM_START

END_OF_TEXT = "<|endoftext|>"
# Order fixes the ids: specials come right after the 256 byte tokens.
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

# A minimal ChatML template so `apply_chat_template` works on the tiny tokenizer as on SmolLM2/Qwen.
_CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level fast tokenizer: 256 byte tokens + <|endoftext|>, <|im_start|>, <|im_end|>.

    eos is <|im_end|> (end of an assistant turn, as in ChatML models); pad is <|endoftext|>.
    """
    byte_of_char = _byte_of_char()
    # Token id == byte value: the printable stand-in of byte b gets id b.
    vocab = {ch: byte_of_char[ch] for ch in ByteLevel.alphabet()}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    # use_regex=False: without merges the split does not change ids, and skipping it is faster.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    # Registered on the backend first so their ids are fixed: 256, 257, 258 in SPECIAL_TOKENS order.
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        model_max_length=8192,
    )
    tokenizer.chat_template = _CHATML_TEMPLATE
    return tokenizer


def _byte_of_char() -> dict[str, int]:
    """GPT-2's bytes_to_unicode table, inverted: printable stand-in character -> byte value."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
) -> LlamaForCausalLM:
    """A randomly initialised LlamaForCausalLM sized to `tokenizer`; the same seed gives the same weights.

    The global torch RNG is left untouched (initialisation runs under a forked RNG state).
    """
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=tokenizer.model_max_length,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
