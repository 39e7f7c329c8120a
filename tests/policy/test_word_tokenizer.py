"""The tiny policy's word tokenizer: ids, round trip, unknown words."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.policy.word_tokenizer import SPECIAL_TOKENS, WordTokenizer, split_words

VOCAB = ["S", "F", "H", "G", "P", "left", "right", "up", "down", "go to", "fridge", ",", ".", "12", "\n"]


def test_specials_come_first_and_pad_is_zero():
    tok = WordTokenizer(VOCAB)
    assert tok.tokens[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)
    assert tok.pad_id == 0 and (tok.eos_id, tok.unk_id, tok.sep_id) == (1, 2, 5)
    assert len(set(tok.tokens)) == len(tok.tokens), "no duplicates"


def test_vocabulary_entries_are_split_by_the_regex():
    tok = WordTokenizer(VOCAB)
    assert "go to" not in tok.token_to_id
    assert {"go", "to"} <= set(tok.token_to_id)


def test_grid_encodes_word_by_word_and_decodes_back():
    tok = WordTokenizer(VOCAB)
    grid = "P F F\nF H G"
    assert split_words(grid) == ["P", "F", "F", "\n", "F", "H", "G"]
    assert tok.decode(tok.encode(grid)) == grid
    assert tok.decode(tok.encode("<action>left</action>")) == "<action>left</action>"
    assert tok.decode(tok.encode("left")) == "left"


def test_unknown_words_become_unk_and_case_matters():
    tok = WordTokenizer(VOCAB)
    assert tok.encode("left banana Left") == [tok.token_to_id["left"], tok.unk_id, tok.unk_id]


def test_decode_skips_pad_and_eos_only():
    tok = WordTokenizer(VOCAB)
    ids = [tok.pad_id, tok.token_to_id["up"], tok.eos_id, tok.pad_id]
    assert tok.decode(ids) == "up"
    assert tok.decode(ids, skip_special_tokens=False) == "<pad> up <eos> <pad>"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=2, max_value=len(WordTokenizer(VOCAB)) - 1), max_size=30))
def test_encode_decode_round_trip(ids):
    """Any id sequence without pad/eos survives decode -> encode."""
    tok = WordTokenizer(VOCAB)
    assert tok.encode(tok.decode(ids)) == ids


def test_a_phrase_is_one_token_after_the_words_for_its_exact_text_only():
    plain = WordTokenizer(VOCAB)
    tok = WordTokenizer(VOCAB, phrases=["go east", "left", "take coin from table", "go east"])
    assert tok.phrases == ("go east", "take coin from table")  # one word: already a token; duplicates once
    assert all(tok.token_to_id[t] == i for t, i in plain.token_to_id.items())  # the words keep their ids
    east, take = tok.token_to_id["go east"], tok.token_to_id["take coin from table"]
    assert (east, take) == (plain.vocab_size, plain.vocab_size + 1)
    assert tok.encode("go east") == [east] and tok.decode([east]) == "go east"
    assert tok.encode("take coin from table") == [take]
    # inside a longer text, and in any other spelling, a phrase is its words
    assert tok.encode("Admissible commands: go east, left") == plain.encode(
        "Admissible commands: go east, left"
    )
    assert tok.encode("go  east") == [tok.token_to_id["go"], tok.unk_id]


PHRASES = ["go east", "go west", "take coin"]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_text_encodes_as_its_words_unless_it_is_exactly_a_phrase(data):
    words = [*VOCAB, "east", "west", "take", "coin"]
    tok, plain = WordTokenizer(words, phrases=PHRASES), WordTokenizer(words)
    ids = data.draw(st.lists(st.integers(2, plain.vocab_size - 1), min_size=1, max_size=12))
    text = plain.decode(ids)
    want = [tok.token_to_id[text]] if text in PHRASES else ids
    assert tok.encode(text) == want
    phrase = data.draw(st.sampled_from(PHRASES))
    assert tok.encode(tok.decode(tok.encode(phrase))) == [tok.token_to_id[phrase]]  # alone, it round-trips
