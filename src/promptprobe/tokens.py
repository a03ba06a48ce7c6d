"""Words of a text for search and phrase counting: lower-cased words for Latin scripts, and
character unigrams and bigrams for CJK text, which has no spaces between words."""

import re
import unicodedata

# CJK text has no spaces: index overlapping character bigrams (plus single characters).
CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
TOKEN = re.compile(rf"[{CJK}]+|[^\W_{CJK}]+")
CJK_RUN = re.compile(rf"[{CJK}]+")
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its me my of on or our "
    "so that the their them there they this to was we what when where which who why will "
    "with you your".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased words for Latin scripts; character unigrams and bigrams for CJK."""
    tokens: list[str] = []
    for match in TOKEN.finditer(unicodedata.normalize("NFKC", text).casefold()):
        token = match.group()
        if CJK_RUN.fullmatch(token):
            tokens.extend(token)
            tokens.extend(token[i : i + 2] for i in range(len(token) - 1))
        elif token not in STOPWORDS:
            tokens.append(token)
    return tokens
