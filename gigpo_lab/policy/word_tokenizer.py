"""A word-level tokenizer for the tiny policy, built from an env's vocabulary list.

Text is split by the regex ``<action>|</action>|\\n|[A-Za-z]+|\\d+|\\S`` (plus the other special tokens), so
``"S F F\\nF H G"`` is ``["S", "F", "F", "\\n", "F", "H", "G"]``. Words are case-sensitive. Ids::

    0 <pad>   1 <eos>   2 <unk>   3 <action>   4 </action>   5 <sep>   6 \\n   7.. the vocabulary, in order

Unknown words map to ``<unk>``. ``decode`` joins words with single spaces (no space around ``\\n``, after
``<action>`` or before ``</action>``), so ``encode(decode(ids)) == ids`` for any ids without pad/eos.

**Phrases.** A multi-word command (TextWorld's ``go east``, Household's ``go to fridge``) can be one token
too, after the words: ``encode`` gives its id for exactly that text (the tiny policy's one-token response, or
an action in its history), and its words everywhere else (``Admissible commands: go east, look``).
``encode(decode(ids)) == ids`` then holds for ids without phrases, or for one phrase alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>", "<action>", "</action>", "<sep>")
NEWLINE = "\n"
_TOKEN_RE = re.compile(r"<pad>|<eos>|<unk>|<sep>|<action>|</action>|\n|[A-Za-z]+|\d+|\S")


def split_words(text: str) -> list[str]:
    """The word pieces of ``text``, by the tokenizer regex (whitespace other than newline is dropped)."""
    return _TOKEN_RE.findall(text)


class WordTokenizer:
    """Word-level tokenizer: ``encode(str) -> list[int]``, ``decode(list[int]) -> str``.

    Args:
        vocabulary: words (or phrases; each is split by the regex) that the env can produce, e.g. from
            ``env.unwrapped.vocabulary()``. Duplicates and specials are ignored; order sets the ids.
        phrases: texts of several words that are also one token each (module doc), ids after the
            vocabulary's, in order; a text of one word is that word's token already, and is skipped.
    """

    def __init__(self, vocabulary: Iterable[str], phrases: Iterable[str] = ()):
        tokens: dict[str, None] = dict.fromkeys((*SPECIAL_TOKENS, NEWLINE))
        for entry in vocabulary:
            tokens.update(dict.fromkeys(split_words(entry)))
        self.phrases: tuple[str, ...] = tuple(p for p in dict.fromkeys(phrases) if len(split_words(p)) > 1)
        tokens.update(dict.fromkeys(self.phrases))
        self.tokens: list[str] = list(tokens)
        self.token_to_id: dict[str, int] = {t: i for i, t in enumerate(self.tokens)}
        self._phrase_ids = {p: self.token_to_id[p] for p in self.phrases}
        self.pad_id = self.token_to_id["<pad>"]
        self.eos_id = self.token_to_id["<eos>"]
        self.unk_id = self.token_to_id["<unk>"]
        self.sep_id = self.token_to_id["<sep>"]
        self.action_open_id = self.token_to_id["<action>"]
        self.action_close_id = self.token_to_id["</action>"]

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; words outside the vocabulary become ``unk_id``; a phrase's exact text, its id."""
        if text in self._phrase_ids:
            return [self._phrase_ids[text]]
        lookup = self.token_to_id.get
        return [lookup(w, self.unk_id) for w in split_words(text)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids``; with ``skip_special_tokens`` the ``<pad>`` and ``<eos>`` ids are dropped."""
        skip = {self.pad_id, self.eos_id} if skip_special_tokens else set()
        words = [self.tokens[i] for i in ids if i not in skip]
        out: list[str] = []
        for k, word in enumerate(words):
            if k > 0 and not (word in (NEWLINE, "</action>") or words[k - 1] in (NEWLINE, "<action>")):
                out.append(" ")
            out.append(word)
        return "".join(out)
