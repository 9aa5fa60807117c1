"""The answer phrase inside the best sentence, so the reader and the CLI can emphasise it.

The phrase is what the question's kind asks for, found beside the question's own words: a name for who
and for "what is X called" ("the ship's cook, Barbecue"), a date for when, a number for how many, and for
"Who is X?" about a named X the description that introduces X ("Ben Gunn, the maroon"). Every name, date
or count of the sentence is a candidate (never its first word, a pronoun or a stopword, nor a name holding
the question's own); the one standing nearest the question's words wins (fewest other content words and
clause breaks between, summed over the question's terms). No phrase when none stands near them, when two
different ones stand equally near or the sentence lists many (the reader cannot tell which), or for other
kinds (what, why, how, where): a wrongly emphasised phrase misleads more than none. It is always an exact
sub-span of the sentence, a citable tag of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis import LANGUAGES, content_words, detect_language, normalize, word_tokens
from .features import NUMBER_WORDS, text_stems
from .question import Question
from .sentences import definition_pattern

__all__ = ["answer_phrase"]

_WORD = re.compile(r"\w+(?:['’-]\w+)*", re.UNICODE)
"""A word with its inner apostrophes and hyphens ("d’août", "Pesce-cane"), never a closing quote."""
MAX_PHRASE_WORDS = 10
MAX_NAMES = 5
"""A sentence with more different candidates than this is a list ("ni como el caballo de Belorofonte, que se
llamaba Pegaso, ni ..."): no phrase."""
MAX_DISTANCE = 4
"""A phrase is marked only within this distance of one of the question's words (1 + the content words the
question lacks and the clause breaks between): farther off, it is as often about something else. The one
date of a sentence is marked at any distance."""
_NAME_GLUE = frozenset({"of", "de", "del", "di", "da", "van", "von", "la", "le", "du"})
_HONORIFICS = frozenset({"mr", "mrs", "miss", "ms", "dr", "st", "sir", "d", "don", "dona", "sr", "sra", "herr",
                         "frau", "mme", "mlle", "monsieur", "madame", "signor", "signora", "messer", "mastro",
                         "maestro", "senor", "senora", "fra"})
"""Words that go before a name but are never one alone ("Mr" of "Mr. Charles McCarthy")."""
_POSSESSIVE = re.compile(r"['’]s$")
"""A name in the possessive ("America’s") qualifies something else: not who is asked for."""
_ROMAN = re.compile(r"[IVXLCDM]+")
"""A pronoun "I" or a chapter number, never a name."""
_OPENERS = set(".!?:;\"“”«»‹›()[]—–-¿¡'‘’…")
"""Punctuation after which a capital starts a sentence or a quoted clause, and says nothing of a name (an
apostrophe right after a word closes it instead: "Burns' Jacksonville")."""
_MONTHS_AND_DAYS = frozenset(
    "january february march april may june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday enero febrero marzo abril mayo junio julio agosto septiembre "
    "octubre noviembre diciembre lunes martes miercoles jueves viernes sabado domingo gennaio febbraio aprile "
    "maggio giugno luglio settembre ottobre novembre dicembre lunedi martedi mercoledi giovedi venerdi sabato "
    "janvier fevrier mars avril mai juin juillet aout septembre octobre novembre decembre lundi mardi mercredi "
    "jeudi vendredi samedi dimanche januar februar marz juni juli oktober dezember montag dienstag mittwoch "
    "donnerstag freitag samstag sonntag".split())
_ALSO_WORDS = frozenset({"may", "march", "mars"})
"""Months that are also words ("it may", "they march"): a month only where capitalised as a name is."""
_TIMES_OF_DAY = frozenset(
    "morning evening night midnight noon dawn dusk sunrise sunset tonight yesterday today tomorrow winter summer "
    "spring autumn noche medianoche mediodia madrugada amanecer anochecer ayer hoy invierno verano primavera otono "
    "mattina sera notte mezzanotte mezzogiorno alba tramonto ieri oggi domani inverno estate autunno matin soir "
    "nuit minuit midi aube hier hiver ete printemps automne abend nacht mitternacht mittag gestern heute morgen "
    "fruhling sommer herbst".split())
"""Words that say when by themselves. "after", "before", "then" and "once" only order events: never a date."""
_DATE_GLUE = frozenset({"of", "de", "del", "di", "the", "el", "il", "at", "in", "a", "o'clock", "am", "pm"})
_ORDINAL = re.compile(r"\d+(st|nd|rd|th)|(\w+-)?(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
                      r"|eleventh|twelfth|\w+teenth|\w+tieth)|primero|segundo|tercero|primo|secondo|terzo")
_CARDINALS = (NUMBER_WORDS - {"first", "second", "third", "once"}) | {"dreissig"}
"""How many is answered by a count, not an ordinal ("first I") nor "once" (which is also Spanish eleven)."""
_CURRENCY = "$£€¥"
_DATE_PREPOSITIONS = frozenset({"in", "since", "until", "from", "to", "between", "en", "de", "a", "desde", "hasta",
                                "entre", "nel", "dal", "fino", "im", "seit", "bis", "depuis"})
"""A year after one of these ("in 1946") is a date, not how many."""
_CENTURY = frozenset({"century", "siglo", "secolo", "siecle", "jahrhundert"})
"""A date when an ordinal goes before it ("the early nineteenth century")."""
_ROLES = frozenset({"king", "queen", "prince", "princess", "emperor", "empress", "count", "countess", "duke",
                    "duchess", "lord", "lady", "captain", "admiral", "general", "colonel", "doctor", "professor",
                    "rey", "reina", "principe", "princesa", "conde", "re", "regina", "principessa", "conte"})
"""Titles the question may share with the answer ("the Emperor" asked, "the Emperor of Japan" answers)."""
_SAYS_NAME = frozenset({"name", "named", "called", "nombre", "llama", "llamaba", "llamado", "llamada", "llamaban",
                        "nome", "chiama", "chiamava", "chiamato", "chiamata", "chiamavano", "detto", "nom", "nomme",
                        "appele", "appelle", "appelait", "heisst", "hiess", "genannt", "namens"})
"""Words of a sentence that introduce a name ("his name was Stiffstep", "men called him Assipattle")."""
_GERMAN_NAME_LEADS = frozenset({"herr", "herrn", "frau", "fraulein", "von", "namens", "heisst", "hiess", "genannt"})
"""In German every noun is capitalised: a name is told by what goes before it."""
_BREAKS = set(".!?:;\"“”«»‹›()[]—–…")
"""Punctuation between clauses: an answer across it stands farther from the question's words."""
_RELATIVE_WHO = frozenset({"who", "quien", "quienes"})
_ASKS_WHO = frozenset({"who", "quien", "quienes", "chi", "wer", "qui", "quem"})
_SUBJECT_BONUS = 3.0
"""How much nearer a name counts when it stands just before the verb the question asks "who" of."""
_SUBJECT_PRONOUNS = frozenset({"he", "she", "they", "ella", "ellos", "ellas", "egli", "ella", "essi",
                               "il", "elle", "ils", "elles", "er", "sie"})
"""A pronoun just before the asked verb ("and he asked the oracle") stands for the name it refers back to."""
_DETERMINERS = frozenset({"a", "an", "the", "his", "her", "their", "its", "my", "our", "un", "una", "el", "la",
                          "los", "las", "il", "lo", "le", "les", "une", "su", "sus", "suo", "sua"})
_TERM_CAP = 8
"""Distances beyond this count as this much when summed over the question's terms."""
_NAMING_WEIGHT = 0.5
"""A word that says a name ("called", "llamado") counts half a question term: it introduces any name, the
question's own too ("don Quijote, llamado el Caballero de la Triste Figura")."""


_Found = tuple[int, int, int, int]
"""A candidate phrase: its first and last word and its start and end offsets in the sentence."""


@dataclass(frozen=True, slots=True)
class _Word:
    start: int
    end: int
    text: str
    flat: str
    opens: bool
    """First word of the sentence, of a line or of a quoted clause: its capital says nothing."""
    breaks: bool
    """Clause punctuation stands between this word and the one before."""
    content: bool
    """Not a stopword in any language."""
    known: bool
    """The question has the word or its stem: not an answer."""
    term: str
    """The question's term this word matches ("" for none): what the answer stands near."""


def answer_phrase(sentence: str, question: Question, languages: Sequence[str]) -> tuple[int, int] | None:
    """Offsets of the answer phrase inside ``sentence``, or None when the sentence holds no expression of
    what the question's kind asks for near the question's words, or more than one equally near."""
    kind = _phrase_kind(question)
    if kind is None:
        return None
    if kind == "description":
        return _description(sentence, question)
    reading = _Reading(sentence, _read_words(sentence, question, languages), kind,
                       kind == "name" and detect_language(sentence) == "german", _own_names(question),
                       _asked_verb(question, languages))
    found = reading.expressions()
    if len({normalize(sentence[start:end]) for _, _, start, end in found}) > MAX_NAMES:
        return None
    if question.kind == "who" and kind == "name":
        found += reading.relative_subjects()
    return reading.nearest(found)


def _phrase_kind(question: Question) -> str | None:
    """name (who, or :mod:`.question`'s name kind: "What is X called?"), description ("Who is <a name>?"),
    when, number, or None."""
    if question.kind in ("who", "name"):
        return "description" if question.kind == "who" and _names_its_subject(question) else "name"
    return question.kind if question.kind in ("when", "number") else None


def _names_its_subject(question: Question) -> bool:
    """ "Who is Jabez Wilson?" asks what he is (a name is no answer); "Who is the captain?" asks a name."""
    if not question.subject_pattern:
        return False
    spelled = re.search(question.subject_pattern, question.text, re.IGNORECASE)
    return spelled is not None and spelled.group(0)[:1].isupper()


def _own_names(question: Question) -> frozenset[str]:
    """The question's capitalised words after its first: the name it asks about, never its answer."""
    spelled = _WORD.findall(question.text)[1:]
    return frozenset(normalize(w) for w in spelled if w[:1].isupper()) - _ROLES - _HONORIFICS


def _asked_verb(question: Question, languages: Sequence[str]) -> str:
    """The term of the word after the question's "who", when it is one of its terms ("" otherwise)."""
    tokens = question.query.tokens
    who = next((i for i, t in enumerate(tokens[:2]) if t in _ASKS_WHO), None)
    if who is None or who + 1 >= len(tokens):
        return ""
    stems = sorted(text_stems(tokens[who + 1], tuple(languages)) & set(question.terms))
    return stems[0] if stems else ""


def _description(sentence: str, question: Question) -> tuple[int, int] | None:
    """ "X, a pawnbroker of ..." or "X was the ...": from the article to the end of the clause, or None."""
    found = definition_pattern(question.subject_pattern).search(sentence)
    if found is None:
        return None
    article = found.end() - 1
    while article > found.start() and not sentence[article - 1].isspace() and sentence[article - 1] != ",":
        article -= 1
    clause = re.match(r"[^,;:.!?()\[\]\"“”«»—–\n]+", sentence[article:])
    words = list(_WORD.finditer(clause.group(0) if clause else ""))
    if len(words) < 2:
        return None
    return article, article + words[min(len(words), MAX_PHRASE_WORDS) - 1].end()


def _read_words(sentence: str, question: Question, languages: Sequence[str]) -> list[_Word]:
    content = set(content_words(sentence, LANGUAGES))
    terms = set(question.terms)
    langs = tuple(languages)
    words: list[_Word] = []
    for m in _WORD.finditer(sentence):
        text, flat = m.group(0), normalize(m.group(0))
        gap = sentence[words[-1].end:m.start()] if words else ""
        honorific = gap.strip() == "." and _abbreviates(words[-1].text)
        opens = not words or "\n" in gap or (any(c in _OPENERS for c in gap.lstrip("'’").strip()) and not honorific)
        matched = sorted(text_stems(text, langs) & terms)
        term = matched[0] if matched and _first_token(text) in content else ""
        words.append(_Word(m.start(), m.end(), text, flat, opens, any(c in _BREAKS for c in gap) and not honorific,
                           _first_token(text) in content, flat in question.words or bool(matched), term))
    return words


def _abbreviates(text: str) -> bool:
    """An honorific or an initial, whose full stop ends no sentence ("Mr. Holmes", "W. Haydon Burns")."""
    return normalize(text) in _HONORIFICS or len(text) == 1 and text.isupper()


def _first_token(text: str) -> str:
    """The word as :func:`analysis.content_words` reads it ("Circuit’s" is "circuit" and "s")."""
    tokens = word_tokens(text)
    return tokens[0] if tokens else ""


@dataclass(frozen=True, slots=True)
class _Reading:
    """A sentence's words read for one kind of answer."""

    text: str
    words: list[_Word]
    kind: str
    german: bool
    own_names: frozenset[str]
    verb: str = ""
    """The term right after "Who" ("call" of "Who called the VCR ...?"): its subject, the word before it in
    the sentence, is who is asked for."""

    def core(self, i: int) -> bool:
        """The word is what the kind asks for: a name, a date, a count."""
        word = self.words[i]
        if self.kind == "name":
            return self.name(i)
        if self.kind == "when":
            day = re.split(r"['’]", word.flat)[-1]
            return (bool(re.fullmatch(r"\d{3,4}|\d{1,2}[:.]\d\d", _first_token(word.text)))
                    or (day in _MONTHS_AND_DAYS and (day not in _ALSO_WORDS or self.name(i)))
                    or day in _TIMES_OF_DAY
                    or word.flat in _CENTURY and i > 0 and bool(_ORDINAL.fullmatch(self.words[i - 1].flat)))
        if i > 0 and self.words[i - 1].flat in _DATE_PREPOSITIONS and re.fullmatch(r"1\d{3}|20\d\d", word.text):
            return False
        return any(c.isdigit() for c in word.text) or _first_token(word.text) in _CARDINALS

    def name(self, i: int) -> bool:
        """A capitalised word whose capital is its own: not a sentence's or line's first word, a stopword
        ("I", "Of"), an honorific alone, a chapter number or a possessive; in German only after a word that
        introduces a name ("von Martin Thoma"), since every noun is capitalised there."""
        word = self.words[i]
        if (not word.text[:1].isupper() or word.opens or not word.content or word.flat in _HONORIFICS
                or _ROMAN.fullmatch(word.text) or _POSSESSIVE.search(word.text)):
            return False
        return not self.german or i > 0 and (self.words[i - 1].flat in _GERMAN_NAME_LEADS or self.name(i - 1))

    def part(self, i: int) -> bool:
        """The word continues an expression: the rest of a name, a day and a year around a month, tens."""
        if self.core(i):
            return True
        flat = self.words[i].flat
        if self.kind == "name":
            return flat in _NAME_GLUE or flat in _HONORIFICS
        if self.kind == "when":
            return flat in _DATE_GLUE or bool(_ORDINAL.fullmatch(flat)) or flat.isdigit() or flat in _CARDINALS
        return flat in {"and", "y", "e"}

    def starts(self, i: int) -> bool:
        """An expression starts on a core word, a name on its honorific or title, a date on its ordinal."""
        flat = self.words[i].flat
        if self.kind == "name":
            return self.core(i) or flat in _HONORIFICS or flat in _ROLES
        return self.core(i) or self.kind == "when" and bool(_ORDINAL.fullmatch(flat))

    def joined(self, i: int) -> bool:
        """Words i - 1 and i can be one expression: only spaces between them (or an honorific's full stop,
        the comma of "December 25, 1933" or of "2,000")."""
        left, right = self.words[i - 1], self.words[i]
        gap = self.text[left.end:right.start]
        if not gap.strip():
            return gap.count("\n") <= 1
        if self.kind == "name":
            return gap.strip() == "." and _abbreviates(left.text)
        return gap.strip() == "," and right.text.isdigit() and (self.kind == "number" or len(right.text) == 4)

    def expressions(self) -> list[_Found]:
        """Every maximal expression around a core word, trimmed to start and end on one, as (first word,
        last word, start offset, end offset); none that holds the question's own name ("Mancha" of "don
        Quijote de la Mancha") or is all words of the question."""
        found: list[_Found] = []
        i = 0
        while i < len(self.words):
            if not self.core(i):
                i += 1
                continue
            lo = hi = i
            while lo > 0 and self.part(lo - 1) and self.joined(lo):
                lo -= 1
            while hi + 1 < len(self.words) and self.part(hi + 1) and self.joined(hi + 1):
                hi += 1
            i = hi + 1
            cores = [self.words[j] for j in range(lo, hi + 1) if self.core(j)]
            if any(w.flat in self.own_names for w in cores) or all(w.known for w in cores):
                continue
            while lo < hi and not self.starts(lo):
                lo += 1
            while hi > lo and not self.core(hi):
                hi -= 1
            if hi - lo < MAX_PHRASE_WORDS:
                found.append(self.finish(lo, hi))
        return found

    def finish(self, lo: int, hi: int) -> _Found:
        """A count takes its unit ("six hours": a content word the question lacks) and currency ("£4")."""
        words = self.words
        if (self.kind == "number" and hi + 1 < len(words) and words[hi + 1].content and not words[hi + 1].known
                and not self.text[words[hi].end:words[hi + 1].start].strip()):
            hi += 1
        start = words[lo].start
        if self.kind == "number" and start > 0 and self.text[start - 1] in _CURRENCY:
            start -= 1
        return lo, hi, start, words[hi].end

    def relative_subjects(self) -> list[_Found]:
        """For "Who had seven sons?": "a well-to-do farmer" of "there lived a well-to-do farmer, who had
        seven sons": the noun phrase from its determiner before a relative "who" (or "con quien") followed
        by the question's words."""
        words = self.words
        found: list[_Found] = []
        for w in range(1, len(words)):
            if words[w].flat not in _RELATIVE_WHO or not any(x.term for x in words[w + 1:w + 4]):
                continue
            end = w - 2 if not words[w - 1].content and words[w - 1].known and w >= 2 else w - 1
            for lo in range(end, max(-1, end - 4), -1):
                if lo < end and self.text[words[lo].end:words[lo + 1].start].strip():
                    break
                if words[lo].flat in _DETERMINERS:
                    if lo < end and not any(x.known for x in words[lo + 1:end + 1]):
                        found.append((lo, end, words[lo].start, words[end].end))
                    break
        return found

    def distance(self, lo: int, hi: int, at: int) -> int:
        """1 + the content words the question lacks and the clause breaks between the expression [lo, hi]
        and word ``at`` (the question's own words between them take it no farther)."""
        if lo <= at <= hi:
            return 0
        first, last = (hi + 1, at) if at > hi else (at + 1, lo)
        between = self.words[first:last]
        return 1 + sum(w.content and not w.known for w in between) + sum(w.breaks for w in self.words[first:last + 1])

    def subject_of_verb(self, hi: int, near: dict[str, list[int]]) -> bool:
        """The expression ending at word ``hi`` stands just before the asked verb (at most two stopwords
        between: "Jack Valenti had called")."""
        return any(hi < at <= hi + 3 and self.distance(hi, hi, at) == 1 and not self.words[at].breaks
                   for at in near.get(self.verb, []))

    def nearest(self, found: Sequence[_Found]) -> tuple[int, int] | None:
        """The expression nearest the question's words: within :data:`MAX_DISTANCE` of one of them (any
        distance for the one date of a sentence that holds one), then the least summed distance to each
        (a digit breaking ties: a year before "evening"; then words apart); None when two different
        expressions are equally near."""
        near: dict[str, list[int]] = {}
        for i, w in enumerate(self.words):
            if w.term:
                near.setdefault(w.term, []).append(i)
            elif self.kind == "name" and w.flat in _SAYS_NAME:
                near.setdefault("#name", []).append(i)
        if not near:
            return None
        stand_ins = self.pronoun_subjects(found, near)
        keys = {item: self.nearness(stand_ins.get(item, item), near) for item in found}
        for item in stand_ins:  # the one the sentence says did what is asked wins over names merely near
            summed, apart, nearest = keys[item]
            keys[item] = (summed - _TERM_CAP * len(near), apart, nearest)
        alone = self.kind == "when" and len({normalize(self.text[s:e]) for _, _, s, e in found}) == 1
        ranked = sorted((item for item in found if alone or keys[item][2] <= MAX_DISTANCE), key=keys.__getitem__)
        if not ranked:
            return None
        best = ranked[0]
        rivals = [item for item in ranked[1:] if keys[item][:2] == keys[best][:2]
                  and (item[2] >= best[3] or item[3] <= best[2])
                  and normalize(self.text[item[2]:item[3]]) != normalize(self.text[best[2]:best[3]])]
        return None if rivals else (best[2], best[3])

    def pronoun_subjects(self, found: Sequence[_Found], near: dict[str, list[int]]) -> dict[_Found, _Found]:
        """For a "who" verb whose subject in the sentence is a pronoun ("and he asked the oracle"), the name
        the pronoun refers back to (the last expression before it) judged as if it stood where the pronoun
        does: the one who did it, however far the sentence first named them ("Well, Hermogenes, as you
        know, ... he asked")."""
        stand_ins: dict[_Found, _Found] = {}
        if self.kind != "name" or not self.verb:
            return stand_ins
        for at in near.get(self.verb, []):
            pronoun = next((p for p in range(at - 1, max(-1, at - 3), -1)
                            if self.words[p].flat in _SUBJECT_PRONOUNS), None)
            before = [item for item in found if pronoun is not None and item[1] < pronoun]
            if pronoun is not None and before and not any(w.breaks for w in self.words[pronoun + 1:at + 1]):
                stand_ins[max(before, key=lambda item: item[1])] = (pronoun, pronoun, 0, 0)
        return stand_ins

    def nearness(self, item: _Found, near: dict[str, list[int]]) -> tuple[float, int, int]:
        """(summed distance to each of the question's terms, less the bonuses; words apart; distance to
        the nearest term)."""
        lo, hi, start, end = item
        each = {term: min(self.distance(lo, hi, at) for at in spots) for term, spots in near.items()}
        apart = sum(min(min(abs(at - lo), abs(at - hi)) for at in spots) for spots in near.values())
        digit = any(c.isdigit() for c in self.text[start:end])
        summed = sum(min(d, _TERM_CAP) * (_NAMING_WEIGHT if term == "#name" else 1.0) for term, d in each.items())
        return summed - digit - _SUBJECT_BONUS * self.subject_of_verb(hi, near), apart, min(each.values())
