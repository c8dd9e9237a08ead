"""Token healing on any vocabulary: special tokens are excluded by identity, wherever they sit,
and the window of a 4k-token prompt keeps its start while the user types."""

from __future__ import annotations

from tokenizers import Tokenizer, models

from engine.model.native import SpecialTokens
from engine.prompt.builder import Healer
from engine.prompt.healing import Healing
from engine.prompt.tokenizer import special_id_set
from engine.prompt.window import char_quantum, char_window

# a vocabulary laid out like LLaDA2's, LLaDA-8B's and Dream's: text tokens, then the specials
WORDS = ["a", "r", "re", " re", "ret", " ret", "return", " return", "rest", "x"]
SPECIALS = ["<|mask|>", "<|endoftext|>", "<|role_end|>", "<role>"]
SP = SpecialTokens(mask=len(WORDS), end_of_text=len(WORDS) + 1, end_of_middle=len(WORDS) + 1, pad=len(WORDS) + 1,
                   fim_prefix=-1, fim_suffix=-1, fim_middle=-1)


def _tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="x"))
    tok.add_special_tokens(SPECIALS)
    return tok


def test_special_ids_are_every_added_token_and_the_named_ones() -> None:
    tok = _tokenizer()
    ids = special_id_set(tok, SP)
    assert ids == set(range(len(WORDS), len(WORDS) + len(SPECIALS)))


def test_healing_offers_the_text_tokens_of_a_vocabulary_whose_specials_sit_at_the_end() -> None:
    tok = _tokenizer()
    texts = [tok.id_to_token(i) or "" for i in range(tok.get_vocab_size())]
    heal = Healing(texts, special_id_set(tok, SP))
    allowed = heal.allowed(" re")
    assert allowed is not None  # the old `1 + max(special id)` threshold excluded every token
    assert {texts[i] for i in allowed.nonzero().flatten().tolist()} == {" re", " ret", " return"}
    assert heal.allowed("<") is None  # specials are never offered, `<role>` included
    assert heal.allowed(" return") is None  # nothing longer: nothing to heal


def test_healing_backs_off_the_partial_word_as_the_builders_healer() -> None:
    """`Healing` is the `Healer` the text engine hands its prompt builder (no callback up into
    the engine): it backs off the prompt's trailing word fragment when a token extends it."""
    tok = _tokenizer()
    texts = [tok.id_to_token(i) or "" for i in range(tok.get_vocab_size())]
    heal: Healer = Healing(texts, special_id_set(tok, SP), decode=tok.decode)
    ids = [WORDS.index("a"), WORDS.index(" re")]
    k, partial, allowed = heal.back_off(ids)
    assert (k, partial) == (1, " re") and allowed is not None
    assert {texts[i] for i in allowed.nonzero().flatten().tolist()} == {" re", " ret", " return"}
    assert heal.back_off([WORDS.index(" return")]) == (0, "", None)  # nothing extends it
    assert heal.back_off([]) == (0, "", None)


def test_a_4k_prompt_window_keeps_its_start_for_thousands_of_typed_characters() -> None:
    max_chars = 4096 * 6
    assert char_quantum(448 * 6) == 512  # the embedded model's window moves as before
    assert char_quantum(max_chars) == max_chars // 8
    text = "".join(f"line_{i} = {i}\n" for i in range(4000))
    starts = set()
    for n in range(len(text) - 3000, len(text)):
        cut = char_window(text[:n], max_chars)
        starts.add(n - len(cut))
        assert len(cut) <= max_chars
    assert len(starts) <= 2  # 3,000 characters typed: at most one jump (512-char quanta: 6+)
