"""`PromptLookup`: draft tokens for a decoding row, copied from what the row has already seen.

An agent's turn repeats its context: tool names and argument keys from the schemas in the system
prompt, product ids and titles from the last observation, the JSON shape of its earlier calls. On
the demo's rollouts, 62% of the tokens that followed the most recent earlier occurrence of a row's
last one to three tokens were what the model then drew, and a row drew 3.1 tokens per decode step
(docs/benchmarks.md, "Prompt lookup"). The decode step feeds those draft tokens after the row's last one and the row
keeps the longest run of them that its own draws confirm (batched_local.py), so drafts change how
many tokens a step yields, never which tokens are drawn.

The index maps every n-gram (n = 1..`max_ngram`) to the position after its most recent occurrence;
it is extended as the row grows, O(max_ngram) per token, so a lookup costs no scan of the context.
"""

from __future__ import annotations

MAX_NGRAM = 3  # the longest context suffix matched (longer matches first)


class PromptLookup:
    """Draft tokens for one growing token sequence (module doc)."""

    def __init__(self, tokens: list[int], max_ngram: int = MAX_NGRAM):
        if max_ngram < 1:
            raise ValueError(f"max_ngram={max_ngram} must be >= 1")
        self.max_ngram = max_ngram
        self._tokens: list[int] = []
        self._follow: dict[tuple[int, ...], int] = {}  # n-gram -> index after its latest occurrence
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def extend(self, tokens: list[int]) -> None:
        """Append tokens to the sequence."""
        for token in tokens:
            self._tokens.append(token)
            # The n-grams ending just before the new token now have a follower: register them. The
            # n-grams ending at the new token itself are the suffix a lookup matches, not a source.
            end = len(self._tokens) - 1
            for n in range(1, self.max_ngram + 1):
                if end - n < 0:
                    break
                self._follow[tuple(self._tokens[end - n : end])] = end

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the latest earlier occurrence of the sequence's longest
        matching suffix (`max_ngram` tokens down to 1); empty when nothing matches."""
        if limit <= 0:
            return []
        tokens = self._tokens
        for n in range(min(self.max_ngram, len(tokens)), 0, -1):
            follow = self._follow.get(tuple(tokens[len(tokens) - n :]))
            if follow is not None:
                return tokens[follow : follow + limit]
        return []
