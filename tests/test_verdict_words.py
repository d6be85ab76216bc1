"""Verdict words in the Chinese edition (issue 37): every word of the method has its house
term, the interval is untouched, and only a text that starts with a word changes."""

from pathlib import Path

import pytest

from layernorm_tutorial.lab.common import verdict
from layernorm_tutorial.publishing.book_i18n.verdict_words import CHINESE_WORDS, to_chinese

STYLE = Path(__file__).resolve().parents[1] / "locales" / "zh_CN" / "STYLE.md"


def test_every_word_of_the_method_has_a_chinese_term():
    assert set(CHINESE_WORDS) == set(verdict.WORDS)
    # one term per word: the lesser words are not the full ones
    assert len(set(CHINESE_WORDS.values())) == len(verdict.WORDS)


def test_the_house_terms_are_the_style_guides():
    style = STYLE.read_text(encoding="utf8")
    for english, chinese in CHINESE_WORDS.items():
        assert f"| {english} | {chinese} |" in style, english


@pytest.mark.parametrize(("english", "chinese"), [
    ("holds: +1.6 pts [+0.5, +2.6], n = 5", "成立：+1.6 个百分点 [+0.5, +2.6], n = 5"),
    ("not shown: -0.8 [-3.3, +1.7], n = 5", "未证实：-0.8 [-3.3, +1.7], n = 5"),
    ("too small to matter: +0.01 [-0.02, +0.03], n = 8",
     "小到可忽略：+0.01 [-0.02, +0.03], n = 8"),
    ("exploratory, holds: +15.0 pts", "exploratory, 成立：+15.0 个百分点"),
    ("direction shown: +0.10 nats [+0.08, +0.13], n = 5",
     "方向成立：+0.10 nats [+0.08, +0.13], n = 5"),
    ("† reverse shown: -2.4 pts [-4.4, -0.4], n = 5",
     "† 反向成立：-2.4 个百分点 [-4.4, -0.4], n = 5"),
    ("direction shown: ratio in (1, 10), 95% (1, 33), n = 8",
     "方向成立：比值在 (1, 10), 95% (1, 33), n = 8"),
    ("not shown: ratio in (1, 10), 95% (0, inf), n = 5 (too few seeds for a ladder)",
     "未证实：比值在 (1, 10), 95% (0, inf), n = 5 （随机种子太少，阶梯无法判定）"),
])
def test_a_verdict_reads_in_chinese_with_its_interval(english, chinese):
    assert to_chinese(english) == chinese.replace("exploratory, ", "探索性，")


@pytest.mark.parametrize("text", ["1.6", "the claim holds: yes", "LayerNorm", ""])
def test_other_glued_text_is_left_alone(text):
    assert to_chinese(text) == text
