"""The verdict words in Chinese: a glued verdict inside Chinese prose reads in Chinese.

A chapter glues a verdict as text (``holds: +1.6 pts [+0.5, +2.6], n = 5``), and the glued
value is the same in both editions (it is a cell's output). In the Chinese edition the
word, and the few English phrases a verdict's text contains, are rendered in the house terms
of ``locales/zh_CN/STYLE.md``; the numbers and the interval stay as they are. Only glued text
(myst-nb's ``pasted-text`` nodes) is rewritten, never a code cell's printed output.
"""

from __future__ import annotations

import re

__all__ = ["CHINESE_WORDS", "PHRASES", "to_chinese"]

#: the verdict method's words (``lab.common.verdict.WORDS``) -> the house terms.
CHINESE_WORDS = {
    "holds": "成立",
    "contradicted": "被否定",
    "too small to matter": "小到可忽略",
    "direction shown": "方向成立",
    "reverse shown": "反向成立",
    "not shown": "未证实",
}

#: the other English phrases of a verdict's text, in the order they are replaced.
PHRASES = (
    ("exploratory, ", "探索性，"),
    ("(too few seeds for a ladder)", "（随机种子太少，阶梯无法判定）"),
    ("ratio in ", "比值在 "),
    (" pts", " 个百分点"),
)

_HEAD = re.compile(r"^(?P<mark>†\s*)?(?P<explore>exploratory, )?(?P<word>"
                   + "|".join(re.escape(w) for w in sorted(CHINESE_WORDS, key=len,
                                                          reverse=True))
                   + r"):")


def to_chinese(text: str) -> str:
    """``text`` with a leading verdict word (after an optional Holm mark and "exploratory,")
    and the verdict's English phrases in Chinese; text that does not start with a verdict
    word is returned unchanged."""
    match = _HEAD.match(text)
    if not match:
        return text
    head = (match.group("mark") or "") + ("exploratory, " if match.group("explore") else "")
    body = head + CHINESE_WORDS[match.group("word")] + "：" + text[match.end():].lstrip()
    for english, chinese in PHRASES:
        body = body.replace(english, chinese)
    return body
