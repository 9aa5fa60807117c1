"""The analyzer's shortcuts give what the plain definitions give: word tokens are the runs of ``\\w`` in the
normalized text, index terms are each token's Snowball stem, and the language is the one whose stopwords are
most frequent."""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter

import pytest
import Stemmer

from chapterverse import analysis
from chapterverse.analysis import (LANGUAGES, analyse_query, compound_words, content_words, detect_language,
                                   hyphenated_words, in_another_language, index_terms, normalize, query_terms,
                                   stopword_counts, word_tokens)

ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ \t\n.,;:!?'\"()[]-/\\*&%$#@~`^|<>=+{}"
WIDE = (
    "’“”—‘–«»¿¡\u2060…\u00a0°£€§·×−⁄′ﬁ"  # punctuation and symbols, some decomposed by NFKD
    "éèêëàáâäãåçñóòôöõúùûüíìîïýÿÉÀÇÑÖÜ"  # accented letters, combining marks once decomposed
    "ßæøœłđðþςεγηναβπ木字ɪəˈ²³½\u0301\u0308"  # letters and digits that stay wide, bare combining marks
)
SENTENCES = {
    "english": "The keeper of the lamp was there when the storm came, and he would not leave it for the boat.",
    "spanish": "El guardián de la lámpara estaba allí cuando llegó la tormenta, y no la dejó por el barco.",
    "italian": "Il guardiano della lampada era lì quando venne la tempesta, e non la lasciò per la barca.",
    "french": "Le gardien de la lampe était là quand la tempête est venue, et il ne la quitta pas pour le bateau.",
    "german": "Der Wärter der Lampe war da, als der Sturm kam, und er verließ sie nicht für das Boot.",
    "portuguese": "O guardião da lâmpada estava lá quando a tempestade chegou, mas ele não a deixou pelo barco dos seus amigos.",
}


def _plain_compounds(text: str) -> list[str]:
    """The joined forms of the words of letters joined by single hyphens (hyphen, non-breaking or soft hyphen
    too), in the normalized text: the definition ``compound_words`` shortcuts."""
    hyphened = re.sub("[\u2010\u00ad]", "-", normalize(text))
    return [w.replace("-", "") for w in re.findall(r"\b[^\W\d_]+(?:-[^\W\d_]+)+\b", hyphened)]


def _plain_terms(text: str, stemmer: Stemmer.Stemmer) -> str:
    return " ".join(stemmer.stemWords(re.findall(r"\w+", normalize(text)) + _plain_compounds(text)))


def _random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = ["", "   ", "don’t “stop” — now", "¿Qué pasó?", "naïve café", "straße", "a\u2060b", "x²+y²", "ﬁne",
             "to-day", "Red-Headed League", "bed\u00adroom", "to\u2011morrow", "x-19", "e-mail-", "-a-b-c-d"]
    for _ in range(count):
        ascii_only = rng.random() < 0.5
        pool = ASCII if ascii_only else ASCII + WIDE
        texts.append("".join(rng.choice(pool) for _ in range(rng.randrange(1, 200))))
    return texts


def test_word_tokens_are_the_runs_of_word_characters_in_the_normalized_text() -> None:
    for text in _random_texts(5000, seed=1):
        assert word_tokens(text) == re.findall(r"\w+", normalize(text)), repr(text)


def test_normalize_and_word_tokens_hold_for_every_code_point() -> None:
    """Runs of 500 characters hold many distinct combining marks (removed by one ``translate``), runs of 10 a few
    (removed by ``replace``); every non-word character beyond ASCII, whitespace or not, must still cut a word."""
    def plain_normalize(text: str) -> str:
        return "".join(ch for ch in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(ch))

    characters = [chr(c) for c in range(0x110000)]
    for first in range(0, len(characters), 500):
        for text in ("x".join(characters[first:first + 500]), "x".join(characters[first:first + 10])):
            assert normalize(text) == plain_normalize(text), hex(first)
            assert word_tokens(text) == re.findall(r"\w+", normalize(text)), hex(first)


def test_index_terms_are_each_tokens_stem_also_after_the_memo_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "_STEM_MEMO_WORDS", 50)  # starts afresh many times below
    texts = _random_texts(500, seed=2) + list(SENTENCES.values())
    for language in LANGUAGES:
        stemmer = Stemmer.Stemmer(language)
        for text in texts:
            assert index_terms(text, language) == _plain_terms(text, stemmer), (language, text)
    assert query_terms("the keepers of lamps", ["english"]) == ["keeper", "lamp"]
    monkeypatch.setattr(analysis, "_STEM_MEMO_WORDS", 200_000)
    for language, sentence in SENTENCES.items():  # the second time every word is in the memo
        expected = _plain_terms(sentence, Stemmer.Stemmer(language))
        assert index_terms(sentence, language) == index_terms(sentence, language) == expected


@pytest.mark.parametrize(("question", "evidence", "crosses"), [
    ("What is the name of the sick girl in the wheelchair in Frankfurt?",
     "Und als sie nun ins Zimmer trat, saß da Klara in ihrem Rollstuhl und die Dame war bei ihr.", True),
    ("¿Cuántos soldados de plomo había en la caja?",
     "There were once five-and-twenty tin soldiers; they were all brothers, for they had all been born of one old "
     "tin spoon.", True),
    ("Who is Dante's guide through Hell?",
     "Nel mezzo del cammin di nostra vita mi ritrovai per una selva oscura, ché la diritta via era smarrita.", True),
    # French and Spanish share "la" and "de": a French question about a French book is not a translation
    ("Comment s'appelle la mère de Jeanne ?",
     "Elle était la fille unique du baron et de la baronne, et elle ne savait rien.", False),
    ("Who is Ben Gunn?", "This brought me near to where I had encountered Ben Gunn, the maroon.", False),
    ("Ben Gunn?", "This brought me near to where I had encountered Ben Gunn, the maroon.", False),
    ("Pinocchio?", "C'era una volta un pezzo di legno, e il falegname lo trovò nella sua bottega.", False),
])
def test_a_question_in_another_language_than_its_evidence(question: str, evidence: str, crosses: bool) -> None:
    assert in_another_language(question, evidence) is crosses


def test_the_language_is_the_one_whose_stopwords_are_most_frequent() -> None:
    def reference(text: str, default: str) -> str:
        counts = Counter(re.findall(r"\w+", normalize(text)))
        scores = {lang: sum(counts[w] for w in words) for lang, words in analysis._STOPWORDS.items()}
        best = max(scores, key=scores.__getitem__)
        return best if scores[best] > 0 else default

    for language, sentence in SENTENCES.items():
        assert detect_language(sentence) == language
    rng = random.Random(3)
    words = [w for sentence in SENTENCES.values() for w in sentence.split()]
    for _ in range(2000):  # mixtures, ties included: the first language in LANGUAGES order wins, as before
        text = " ".join(rng.choice(words) for _ in range(rng.randrange(0, 12)))
        for default in ("english", "german"):
            assert detect_language(text, default) == reference(text, default), text


def test_compound_words_are_the_joined_hyphenated_words_of_the_normalized_text() -> None:
    for text in _random_texts(2000, seed=4):
        for hyphen in "-\u2010\u2011\u00ad\ufe63\uff0d":  # those that are, or become under NFKD, a hyphen
            spelled = text.replace("-", hyphen)
            assert compound_words(spelled) == _plain_compounds(spelled), repr(spelled)
    assert compound_words("The Red-headed League; to-day, to\u2011morrow, bed\u00adroom") == [
        "redheaded", "today", "tomorrow", "bedroom"]
    assert compound_words("hispano-americano, sud-est, peut-être, mother-in-law") == [
        "hispanoamericano", "sudest", "peutetre", "motherinlaw"]
    assert compound_words("1914-1918, COVID-19, 555-1234, word--word, red – headed, red—headed") == []


@pytest.mark.parametrize(("book", "question"), [("red-headed", "Redheaded"), ("redheaded", "red-headed"),
                                                ("to-day", "today"), ("bedroom", "bed-room"), ("e-mail", "email")])
def test_either_spelling_of_a_compound_finds_the_other(book: str, question: str) -> None:
    """A question's terms meet a book's in the joined form, whichever of the two hyphenates the word; the parts stay
    terms of their own on both sides."""
    held = set(index_terms(f"He wrote of it {book}.", "english").split())
    asked = query_terms(f"What of it {question}?", ["english", "spanish"])
    assert held & set(asked) - set(query_terms("What of it?", ["english", "spanish"]))


def test_a_query_read_once_holds_what_each_reading_of_it_gives() -> None:
    """``analyse_query`` is the one reading of a question every stage takes: its tokens, content words, hyphenated
    words, stems, stopword counts and language are what the separate functions give for the same text."""
    rng = random.Random(5)
    texts = [*_random_texts(300, seed=11), *SENTENCES.values(), "Who is the red-headed man?", "the of", ""]
    for text in texts:
        languages = rng.sample(LANGUAGES, rng.randint(0, 3))
        query = analyse_query(text, languages)
        assert query.tokens == tuple(word_tokens(text)), repr(text)
        assert query.content == tuple(content_words(text, languages)), repr(text)
        assert query.hyphenated == tuple(hyphenated_words(text)), repr(text)
        assert query.terms == tuple(query_terms(text, languages)), repr(text)
        assert query.stopwords == stopword_counts(text) and query.language("") == detect_language(text, ""), repr(text)
