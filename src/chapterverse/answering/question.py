"""What a question asks for: its kind (who, when, how many ...), its terms and, for "Who is X?", its subject.

The kind decides which sentences can answer at all: a "who" question wants a sentence that names someone
the question does not, a "when" question a date or a time, "how many" a number. Question words are read in
English, Spanish, Italian, French, German and Portuguese, on accent-stripped text (``analysis.normalize``).

A :class:`Question` is read from the question's :class:`~chapterverse.analysis.AnalysedQuery` (its tokens, content
words and stems), which it carries on to the search: the question is analysed once for every stage of an answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis import AnalysedQuery, analyse_query, content_words, query_terms, word_tokens

__all__ = ["Question", "read_question", "as_question", "reader_terms"]

_KIND_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(pattern)) for kind, pattern in (
    ("number", r"\bhow (many|much|old|long|far|big|tall)\b|\bwhat (percentage|number|amount)\b"
               r"|\bcuant[oa]s?\b|\bque (porcentaje|cantidad|edad)\b|\bquant[aeio]\b|\bcombien\b|\bquel age\b"
               r"|\bwie (viele|viel|alt|lange|weit|gross)\b|\bquantos?\b|\bquantas?\b"),
    ("when", r"\bwhen\b|\bwhat (year|time|day|month|century|date|age)\b|\bcuando\b|\ben que (ano|siglo|fecha|epoca|mes)\b"
             r"|\bquando\b|\bin (che|quale) (anno|secolo|epoca)\b|\bquand\b|\bquel(le)? (annee|jour|mois|siecle)\b"
             r"|\bwann\b|\bin welchem (jahr|monat)\b|\bem que ano\b"),
    ("who", r"\bwho(m|se)?\b|\bquien(es)?\b|\bchi\b|\bqui\b|\bwer\b|\bwem\b|\bwen\b|\bwessen\b|\bquem\b"),
    ("where", r"\bwhere\b|\b(a|de)?donde\b|\bdove\b|\bou\b|\bwo(hin|her)?\b|\bonde\b"),
    ("why", r"\bwhy\b|\bpor que\b|\bperche\b|\bcome mai\b|\bpourquoi\b|\bwarum\b|\bweshalb\b|\bwieso\b"),
    ("how", r"\bhow\b|\bcomo\b|\bcome\b|\bcomment\b|\bwie\b"),
))
_NAME_ASKED = re.compile(
    r"\b(names?|nicknames?|called|named|nombres?|apodo|sobrenombre|llama|llamaba|llaman|llamaban|llamo|nome|nomi"
    r"|soprannome|chiama|chiamava|chiamano|chiamavano|chiamato|noms?|surnom|appelle|appelait|appellent|nomme"
    r"|heißt|heisst|hieß|hiess|heißen|heissen|hießen|nennen|nennt|nannte|nannten|namen?|spitzname)\b")
"""A what- or how-question that asks for a name ("What is the name of the inn?", "¿Cómo se llamaba la
criada?", "Wie heißt der Diener?"): it wants a name the question does not hold, as a who-question does."""
_NAME_WORDS = 8
"""The name word counts among the first eight words ("What was Tristana's father's name?")."""
_YES_NO = re.compile(r"^(did|does|do|is|was|were|are|can|could|will|would|has|have|had|should|must)\b")
_LEAD_WORDS = 3
"""A question word counts only among the first three words ("In what year", "¿En qué año"), so
"What did she do when ...?" is a what-question."""

_DEFINITION = re.compile(
    r"^(?:who|what) (?:is|was|are|were) (?:the |a |an )?(?P<en>.+)$"
    r"|^(?:quien(?:es)?|que) (?:es|era|fue|son|eran) (?:el |la |los |las |un |una )?(?P<es>.+)$"
    r"|^(?:chi|che cosa|cosa|che) (?:e|era|sono|erano|fu) (?:il |lo |la |i |gli |le |un |una |l )?(?P<it>.+)$"
)


_IRREGULAR = {form: base for base, forms in (
    ("be", "was were been"), ("become", "became"), ("begin", "began begun"), ("bring", "brought"),
    ("build", "built"), ("buy", "bought"), ("catch", "caught"), ("choose", "chose chosen"), ("come", "came"),
    ("do", "did done"), ("draw", "drew drawn"), ("drink", "drank drunk"), ("drive", "drove driven"),
    ("eat", "ate eaten"), ("fall", "fell fallen"), ("feel", "felt"), ("fight", "fought"), ("find", "found"),
    ("fly", "flew flown"), ("forget", "forgot forgotten"), ("get", "got gotten"), ("give", "gave given"),
    ("go", "went gone"), ("grow", "grew grown"), ("have", "had"), ("hear", "heard"), ("hide", "hid hidden"),
    ("hold", "held"), ("keep", "kept"), ("know", "knew known"), ("lead", "led"), ("leave", "left"),
    ("lose", "lost"), ("make", "made"), ("meet", "met"), ("pay", "paid"), ("ride", "rode ridden"),
    ("ring", "rang rung"), ("rise", "rose risen"), ("run", "ran"), ("say", "said"), ("see", "saw seen"),
    ("seek", "sought"), ("sell", "sold"), ("send", "sent"), ("shake", "shook shaken"), ("shoot", "shot"),
    ("sing", "sang sung"), ("sit", "sat"), ("sleep", "slept"), ("speak", "spoke spoken"), ("spend", "spent"),
    ("stand", "stood"), ("steal", "stole stolen"), ("strike", "struck"), ("swim", "swam swum"),
    ("take", "took taken"), ("teach", "taught"), ("tell", "told"), ("think", "thought"), ("throw", "threw thrown"),
    ("understand", "understood"), ("wake", "woke woken"), ("wear", "wore worn"), ("win", "won"),
    ("write", "wrote written"), ("bite", "bit bitten"), ("blow", "blew blown"),
    ("break", "broke broken"), ("dig", "dug"), ("feed", "fed"), ("freeze", "froze frozen"), ("hang", "hung"),
    ("lay", "laid"), ("lie", "lay lain"), ("light", "lit"), ("shine", "shone"), ("sink", "sank sunk"),
    ("slay", "slew slain"), ("spin", "spun"), ("swear", "swore sworn"), ("weep", "wept"),
) for form in forms.split()}
"""English irregular verb forms and their base: "What did she find?" must match "she found", which no
stemmer relates. Applied to questions and sentences alike, only by the reader (retrieval keeps its terms)."""
_WORD_RUN = re.compile(r"\w+")


_FRAME_WORDS = frozenset({"name", "names", "nombre", "nombres", "nome", "nomi"})
"""Words that frame a question rather than ask about anything: "What was the name of the cat?" is answered
by "a grey cat called Admiral", which never says "name"."""


def reader_terms(text: str, languages: Sequence[str]) -> list[str]:
    """The stems the reader compares: :func:`analysis.query_terms` with irregular verb forms made regular."""
    return query_terms(_regular_verbs(text, languages), languages)


def _regular_verbs(text: str, languages: Sequence[str]) -> str:
    if "english" in languages:
        return _WORD_RUN.sub(lambda m: _IRREGULAR.get(m.group(0).lower(), m.group(0)), text)
    return text


def _question_terms(query: AnalysedQuery) -> tuple[str, ...]:
    """The reader's terms of a question, less its frame words (unless nothing else is left); the query's own
    terms where neither a frame word nor an irregular verb form changes what is stemmed."""
    text, languages = query.text, query.languages
    framed = _WORD_RUN.sub(lambda m: "" if m.group(0).lower() in _FRAME_WORDS else m.group(0), text)
    if framed != text and content_words(framed, languages):
        return tuple(reader_terms(framed, languages))
    regular = _regular_verbs(text, languages)
    return query.terms if regular == text else tuple(query_terms(regular, languages))


@dataclass(frozen=True, slots=True)
class Question:
    query: AnalysedQuery
    """The question as the search reads it: what the reader hands to ``Library.search``."""
    kind: str
    terms: tuple[str, ...]
    """Stems of the content words in every language of the library (what BM25 matches)."""
    words: frozenset[str]
    """Every normalized word of the question, stopwords included: a sentence word among them is not new."""
    subject: tuple[str, ...]
    """The content words X of "Who/What is X?" (empty for other questions)."""
    subject_pattern: str = ""
    """A case-insensitive regex for X as the question spells it ("" for other questions)."""
    part: int | None = None
    """The number of the part of the book the question names ("in the first eclogue": 1), or None."""

    @property
    def text(self) -> str:
        return self.query.text


def read_question(query: AnalysedQuery) -> Question:
    """The kind, terms, words, definitional subject and named part of the question ``query`` holds."""
    text, tokens = query.text, query.tokens
    flat = " ".join(tokens)
    subject = _subject(flat, query.languages)
    spelled = [w for w in re.findall(r"\w+", text) if subject and word_tokens(w) and word_tokens(w)[0] in subject]
    pattern = r"\W+".join(re.escape(w) for w in spelled)
    return Question(query=query, kind=_kind(flat), terms=_question_terms(query), words=frozenset(tokens),
                    subject=subject, subject_pattern=pattern, part=_named_part(flat))


def as_question(question: str | Question, languages: Sequence[str]) -> Question:
    """``question`` read in ``languages`` (the library's) when it is a text; a Question is handed on as it was
    read. Every entry point of an answer takes either, so a question is analysed once however many stages
    (the search, the reader, the model's forced search, the extractive answer begun ahead) use it."""
    return question if isinstance(question, Question) else read_question(analyse_query(question, languages))


def _kind(flat: str) -> str:
    lead = " ".join(flat.split()[:_LEAD_WORDS])
    found = [(m.start(), order, kind) for order, (kind, pattern) in enumerate(_KIND_PATTERNS)
             if (m := pattern.search(lead))]
    kind = min(found)[2] if found else "yesno" if _YES_NO.match(flat) else "what"
    if kind in ("what", "how") and _NAME_ASKED.search(" ".join(flat.split()[:_NAME_WORDS])):
        return "name"
    return kind


def _subject(flat: str, languages: Sequence[str]) -> tuple[str, ...]:
    match = _DEFINITION.match(flat)
    if not match:
        return ()
    rest = next(group for group in match.groups() if group)
    return tuple(content_words(rest, languages))



_ORDINALS = {word: n for n, words in enumerate((
    "first primo primero primera premier premiere erste erster erstes", "second secondo segundo segunda deuxieme zweite",
    "third terzo tercero tercera troisieme dritte", "fourth quarto cuarto cuarta quatrieme vierte",
    "fifth quinto quinta cinquieme funfte", "sixth sesto sexto sexta sixieme sechste",
    "seventh settimo septimo septima septieme siebte", "eighth ottavo octavo octava huitieme achte",
    "ninth nono noveno novena neuvieme neunte", "tenth decimo decima dixieme zehnte"), start=1)
    for word in words.split()}
_PARTS = (r"eclogues?|odes?|poems?|chapters?|cantos?|staves?|books?|parts?|letters?|acts?|songs?|stories|story|"
          r"egloga|capitulo|canto|libro|parte|poema|cancion|chapitre|livre|partie|kapitel|buch|teil|gedicht|ode")
_PART_BY_ORDINAL = re.compile(rf"\b(?P<n>[a-z]+|\d{{1,3}}(?:st|nd|rd|th))\s+(?:{_PARTS})\b")
_PART_BY_NUMBER = re.compile(rf"\b(?:{_PARTS})\s+(?P<n>\d{{1,3}}|[ivxlc]{{1,7}}|[a-z]+)\b")
_ROMAN_VALUES = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100}


def _named_part(flat: str) -> int | None:
    """The number of the part of the book a question names ("in the first eclogue", "the third ode",
    "chapter 12", "canto V", "el capítulo segundo" read as 1, 3, 12, 5, 2), or None; ``flat``: the question's
    tokens joined by spaces."""
    for match in _PART_BY_ORDINAL.finditer(flat):
        word = match.group("n")
        if word in _ORDINALS:
            return _ORDINALS[word]
        if word[:-2].isdigit():
            return int(word[:-2])
    numbered = _PART_BY_NUMBER.search(flat)
    if numbered is None:
        return None
    number = numbered.group("n")
    if number.isdigit():
        return int(number)
    if number in _ORDINALS:
        return _ORDINALS[number]
    if number == "i" or any(ch not in _ROMAN_VALUES for ch in number):  # "the book I read"
        return None
    values = [_ROMAN_VALUES[ch] for ch in number]
    return sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))
