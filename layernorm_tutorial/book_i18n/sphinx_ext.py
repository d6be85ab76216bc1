"""Sphinx extension for the two editions (English in ``_build/html``, Chinese in ``zh/``).

- Every page gets a link to the same page in the other edition, in the header next to the
  download and full-screen buttons (the template ``templates/language-switch.html``).
- ``<html lang>`` is the BCP 47 tag (``zh-CN``), not Sphinx's ``zh_CN``.

The Chinese edition lives in the subfolder ``zh/`` of the English one, so the links are
relative: ``book/x.html`` <-> ``zh/book/x.html``.
"""

from __future__ import annotations

from pathlib import Path

ZH_SUBDIR = "zh"
TEMPLATE = "language-switch.html"
HEADER_SLOT = "article_header_end"
THEME_DEFAULT_HEADER_END = ["article-header-buttons.html"]

SWITCH_TO_ZH = {"text": "中文", "hreflang": "zh-CN", "title": "阅读本页的中文版"}
SWITCH_TO_EN = {"text": "English", "hreflang": "en", "title": "Read this page in English"}


def is_chinese(language: str | None) -> bool:
    return bool(language) and language.lower().replace("-", "_").startswith("zh")


def html_lang(language: str | None) -> str:
    """``zh_CN`` -> ``zh-CN``; no language -> ``en``."""
    return (language or "en").replace("_", "-")


def other_edition_url(pagename: str, chinese: bool) -> str:
    """Relative URL from page ``pagename`` to the same page in the other edition."""
    up = "../" * pagename.count("/")
    if chinese:
        return f"../{up}{pagename}.html"
    return f"{up}{ZH_SUBDIR}/{pagename}.html"


def _add_template_and_slot(app, config) -> None:
    config.templates_path = [*config.templates_path, str(Path(__file__).parent / "templates")]
    options = dict(config.html_theme_options or {})
    slot = options.get(HEADER_SLOT, THEME_DEFAULT_HEADER_END)
    if isinstance(slot, str):
        slot = [name.strip() for name in slot.split(",") if name.strip()]
    if TEMPLATE not in slot:
        options[HEADER_SLOT] = [*slot, TEMPLATE]
    config.html_theme_options = options


def _page_context(app, pagename, templatename, context, doctree) -> None:
    chinese = is_chinese(app.config.language)
    context["language"] = html_lang(app.config.language)
    switch = dict(SWITCH_TO_EN if chinese else SWITCH_TO_ZH)
    switch["url"] = other_edition_url(pagename, chinese)
    context["language_switch"] = switch


def setup(app):
    app.connect("config-inited", _add_template_and_slot)
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
