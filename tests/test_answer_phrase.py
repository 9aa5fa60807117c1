"""The answer phrase the reader emphasises inside its best sentence (``answer_spans``).

On the exact sentences the reader showed a new user, where the phrase was wrong though the sentence was
right (or where no phrase is right at all): a name near the question's words, never a sentence's first
word, a pronoun or the question's own name; a date for "when", never "After"; for "Who is <a name>?" the
description that introduces them, or nothing; and nothing in a list of names where the reader cannot tell.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from chapterverse.answering.phrases import answer_phrase
from chapterverse.answering.question import as_question

ENGLISH = ["english"]
SPANISH = ["spanish"]
EVERY = ["english", "french", "german", "italian", "spanish"]

DOLORIDA = (
    "-El nombre -respondió la Dolorida- no es como el caballo de Belorofonte, que se llamaba Pegaso, ni como el "
    "del Magno Alejandro, llamado Bucéfalo, ni como el del furioso Orlando, cuyo nombre fue Brilladoro, ni menos "
    "Bayarte, que fue el de Reinaldos de Montalbán, ni Frontino, como el de Rugero, ni Bootes ni Peritoa, como "
    "dicen que se llaman los del Sol, ni tampoco se llama Orelia, como el caballo en que el desdichado Rodrigo, "
    "último rey de los godos, entró en la batalla donde perdió la vida y el reino.")


def phrase(question: str, sentence: str, languages: list[str]) -> str | None:
    span = answer_phrase(sentence, as_question(question, languages), languages)
    return sentence[span[0]:span[1]] if span else None


@pytest.mark.parametrize(("question", "sentence", "languages", "expected"), [
    ("Who invented FM radio?",  # was "Christmas": a name far from the question's words
     "On the day after Christmas, 1933, four patents were issued to Armstrong for his most significant "
     "invention—FM radio.", ENGLISH, "Armstrong"),
    ("Who is Jabez Wilson?",  # was "I": a definitional question wants a description, never a pronoun
     "“Well, it is just as I have been telling you, Mr. Sherlock Holmes,” said Jabez Wilson, mopping his "
     "forehead; “I have a small pawnbroker’s business at Coburg Square, near the City.", ENGLISH, None),
    ("When was the Sonny Bono Copyright Term Extension Act passed?",  # was "After": a connective is no date
     "After the Sonny Bono Act, that term\nwas ninety-five years.", ENGLISH, None),
    ("¿Cómo se llama el escudero de don Quijote?",  # was "Mancha": part of the question's own name
     "Yo soy Sancho Panza, su escudero, y él es el asendereado caballero don Quijote de la Mancha, llamado por "
     "otro nombre el Caballero de la Triste Figura.", SPANISH, "Sancho Panza"),
    ("¿Cómo se llama el caballo de don Quijote?",  # was "Rugero": a list of other knights' horses
     DOLORIDA, SPANISH, None),
])
def test_the_phrases_a_new_user_saw_wrong(question: str, sentence: str, languages: list[str],
                                          expected: str | None) -> None:
    assert phrase(question, sentence, languages) == expected


@pytest.mark.parametrize(("question", "sentence", "expected"), [
    ("Who is Ben Gunn?", "This brought me near to where I had encountered Ben Gunn, the maroon;\nand I walked "
     "more circumspectly, keeping an eye on every side.", "the maroon"),
    ("Who was RCA's president and a friend of Armstrong?", "RCA’s president, David Sarnoff, a friend of "
     "Armstrong’s, was eager\nthat Armstrong discover a way to remove static from AM radio.", "David Sarnoff"),
    ("Who called the VCR 'the Boston Strangler'?", "Under the Ninth Circuit’s rule, this totally familiar "
     "technology—which Jack Valenti had called “the Boston Strangler\nof the American film industry” (worse yet, "
     "it was a Japanese Boston\nStrangler of the American film industry)—was an illegal technology.",
     "Jack Valenti"),
    ("Who rows Dante and Virgil across the Styx?", "More than a thousand ruined souls I saw,\n    Thus fleeing "
     "from before one who on foot\n    Was passing o’er the Styx with soles unwet.", None),
    ("Wer hat dieses Skript geschrieben?", "Vorwort\nDieses Skript wurde im Wintersemester 2013/2014 von Martin "
     "Thoma geschrieben.", "Martin Thoma"),
    ("How much did the Red-Headed League pay its member?", "“To the Redheaded League: On account of the bequest "
     "of the late Ezekiah Hopkins, of Lebanon, Pennsylvania, U.S.A., there is now another vacancy open which "
     "entitles a member of the League to a salary of £4 a week for purely nominal services.", "£4"),
    ("Quand eut lieu le baptême de Paul ?", "Le baptême eut lieu vers la fin d’août.", "d’août"),
    ("How many times has Polonia won the cup?", "They also won the country’s championship in 1946, and won the cup "
     "twice as well.", "twice"),
])
def test_the_phrase_stands_beside_the_questions_words(question: str, sentence: str, expected: str | None) -> None:
    """From the long-book questions (tests/data/longbooks) and XQuAD: a pronoun, a sentence's or a verse
    line's first word, a German noun, an acronym never stand for a name; a sum keeps its currency; a year
    is no count."""
    assert phrase(question, sentence, EVERY) == expected


def test_who_did_it_is_the_noun_phrase_before_the_relative_who() -> None:
    sentence = ("In far bygone days, in the North, there lived a well-to-do farmer, who\nhad seven sons and one "
                "daughter.")
    assert phrase("Who had seven sons and one daughter?", sentence, ENGLISH) == "a well-to-do farmer"


def test_a_question_of_kind_name_is_answered_by_a_name() -> None:
    """A question :mod:`.question` reads as asking a name (kind "name") is answered as "who" is, whatever
    its words."""
    question = as_question("¿Cuál es el escudero de don Quijote?", SPANISH)
    sentence = "Yo soy Sancho Panza, su escudero, y él es el asendereado caballero don Quijote de la Mancha."
    span = answer_phrase(sentence, replace(question, kind="name"), SPANISH)
    assert span is not None and sentence[span[0]:span[1]] == "Sancho Panza"


ORACLE = ("Well, Hermogenes, as you know, was eager in all that he did, and he went to Dodona and boldly asked the "
          "oracle to tell him whether—as I was saying, I must beg you not to interrupt—he asked the oracle to tell "
          "him whether anyone was braver than Laches, and the Dodonaean priestess answered that there was no man "
          "braver.")
"""The shape of a dialogue's account of an oracle: the one who asked is named at the start and then is "he"; the
name nearest the question's words ("the Dodonaean priestess") is the one who answered."""


def test_who_did_it_is_the_name_the_pronoun_before_the_verb_stands_for() -> None:
    question = "Who asked the oracle at Dodona whether anyone was braver than Laches?"
    assert phrase(question, ORACLE, ENGLISH) == "Hermogenes"
    assert phrase("Who answered that there was no man braver?", ORACLE, ENGLISH) == "Dodonaean"
