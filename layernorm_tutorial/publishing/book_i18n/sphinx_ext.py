"""Sphinx extension for the two editions (English in ``_build/html``, Chinese in ``zh/``).

- Every page gets a link to the same page in the other edition, in the header before the
  download and full-screen buttons (``templates/language-switch.html``, styled by
  ``static/language-switch.css``).
- ``<html lang>`` is the BCP 47 tag (``zh-CN``), not Sphinx's ``zh_CN``.
- The part captions of ``_toc.yml`` are translated: sphinx-external-toc inserts its
  toctrees after Sphinx has translated the page, so the captions (extracted into the root
  page's catalog) are looked up here.
- Table cells inside a directive (a table in a dropdown answer) are translatable: MyST
  gives their paragraphs no ``source``, which Sphinx reads as "generated text, do not
  translate"; they inherit the source of the enclosing directive here.
- Two costs of Sphinx 7's translated builds are removed (the Chinese edition took five
  times as long as the English one): each translated message is parsed as a small document
  of its own, and its nodes kept that document, whose settings hold the whole build
  environment, so every page's pickled doctree carried a copy of everything read before it
  (2.7 MB for the last page instead of 0.2 MB, each unpickled again for cross-references);
  the nodes are re-attached to their page here. And the Chinese search splitter kept every
  Latin word of the book in a list that it searched once per indexed word (quadratic);
  it is a set here, with the same membership answers.
- ``{glue}`` roles inside translated messages find the notebook's glued values: Sphinx
  parses each translation as a separate small document, which myst-nb's glue roles would
  otherwise search in vain ("No key ... found in glue data").
- An exercise's title (the argument of sphinx-exercise's ``{exercise}``: ``Exercise 2
  (Invariance, exactly)``) is a message of its page like every other title: the directive
  gives it the argument as its source text, the Chinese edition translates it (the
  solution's title, which repeats it, included), and the gettext builder extracts it, in
  page order (sphinx-exercise rebuilds the title after reading, so the extraction, which
  sees the rebuilt page, would miss it). The argument of ``{solution}`` is the exercise's
  label, not prose: no message.

The Chinese edition lives in the subfolder ``zh/`` of the English one, so the links are
relative: ``book/x.html`` <-> ``zh/book/x.html``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

ZH_SUBDIR = "zh"
TEMPLATE = "language-switch.html"
STYLESHEET = "language-switch.css"
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
    here = Path(__file__).parent
    config.templates_path = [*config.templates_path, str(here / "templates")]
    config.html_static_path = [*config.html_static_path, str(here / "static")]
    options = dict(config.html_theme_options or {})
    slot = options.get(HEADER_SLOT, THEME_DEFAULT_HEADER_END)
    if isinstance(slot, str):
        slot = [name.strip() for name in slot.split(",") if name.strip()]
    if TEMPLATE not in slot:
        options[HEADER_SLOT] = [TEMPLATE, *slot]
    config.html_theme_options = options


def _page_context(app, pagename, templatename, context, doctree) -> None:
    chinese = is_chinese(app.config.language)
    context["language"] = html_lang(app.config.language)
    switch = dict(SWITCH_TO_EN if chinese else SWITCH_TO_ZH)
    switch["url"] = other_edition_url(pagename, chinese)
    context["language_switch"] = switch


_NOTEBOOK_RENDERER: dict[str, object] = {}
"""docname -> the myst-nb renderer of the notebook being read (one entry at a time)."""


def _share_glue_with_translations(app) -> None:
    """Wrap myst-nb's parser: a translated message of a notebook is parsed with the
    notebook's renderer attached, so ``{glue}`` roles in it resolve as in the original.
    (myst-nb keeps the renderer on the document only while parsing the notebook, so it is
    recorded when it is created.)"""
    from myst_nb.core.render import NbElementRenderer
    from myst_nb.sphinx_ import Parser

    if getattr(Parser.parse, "shares_glue_with_translations", False):
        return
    original_parse, original_init = Parser.parse, NbElementRenderer.__init__
    reading: list[str] = [""]

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        _NOTEBOOK_RENDERER.clear()
        _NOTEBOOK_RENDERER[reading[0]] = self

    def parse(self, inputstring, document):
        env = getattr(document.settings, "env", None) or self.env
        if str(document.current_source or "").endswith("<translated>"):
            renderer = _NOTEBOOK_RENDERER.get(env.docname)
            if renderer is None:
                return original_parse(self, inputstring, document)
            document["nb_renderer"] = renderer
            try:  # the roles run while parsing; the doctree must not keep the renderer
                return original_parse(self, inputstring, document)
            finally:
                document.attributes.pop("nb_renderer", None)
        else:
            reading[0] = env.docname
        return original_parse(self, inputstring, document)

    parse.shares_glue_with_translations = True
    NbElementRenderer.__init__ = init
    Parser.parse = parse


def _translate_toc_captions(app, doctree) -> None:
    """Translate the ``caption`` of every toctree of the page just read (see above)."""
    from os import path

    from sphinx import addnodes
    from sphinx.locale import init as init_locale
    from sphinx.util.i18n import docname_to_domain

    if not is_chinese(app.config.language):
        return
    toctrees = [node for node in doctree.findall(addnodes.toctree) if node.get("caption")]
    if not toctrees:
        return
    domain = docname_to_domain(app.env.docname, app.config.gettext_compact)
    dirs = [path.join(app.srcdir, directory) for directory in app.config.locale_dirs]
    catalog, has_catalog = init_locale(dirs, app.config.language, domain)
    if not has_catalog:
        return
    for node in toctrees:
        node["caption"] = catalog.gettext(node["caption"])


def _table_cells_need_a_source():
    from docutils import nodes
    from sphinx.transforms import SphinxTransform

    class TableCellSource(SphinxTransform):
        """Give every paragraph of a table the source and line of its nearest ancestor
        that has one, before Sphinx extracts (gettext) or translates (Locale, priority 20)
        the messages."""

        default_priority = 5

        def apply(self, **kwargs) -> None:
            for entry in self.document.findall(nodes.entry):
                for paragraph in entry.findall(nodes.paragraph):
                    if paragraph.source:
                        continue
                    ancestor = paragraph.parent
                    while ancestor is not None and not ancestor.source:
                        ancestor = ancestor.parent
                    if ancestor is not None:
                        paragraph.source, paragraph.line = ancestor.source, ancestor.line

    return TableCellSource


def _reattach_translated_nodes(app, doctree) -> None:
    """``doctree-read`` (translated editions): nodes that came from a translated message
    still point to the small document the message was parsed in (``node.document``), and
    through its settings to the build environment; point them to their page instead."""
    if not app.config.language or not is_chinese(app.config.language):
        return
    for node in doctree.findall():
        if getattr(node, "_document", None) not in (None, doctree):
            node.document = doctree


class _TermSet(set):
    """A set that also answers ``extend``: Sphinx's Chinese splitter collects the Latin
    words in a class-level list (``latin_terms.extend``) and tests ``word in latin_terms``
    for every word it indexes."""

    def extend(self, items) -> None:
        self.update(items)


def _chinese_search_terms_as_a_set() -> None:
    try:
        from sphinx.search.zh import SearchChinese
    except ImportError:  # pragma: no cover - Sphinx without the Chinese splitter
        return
    if isinstance(getattr(SearchChinese, "latin_terms", None), list):
        SearchChinese.latin_terms = _TermSet(SearchChinese.latin_terms)


def _verdict_words_in_chinese(app, doctree) -> None:
    """``doctree-read`` (Chinese edition): a glued verdict (``holds: +1.6 ...``) shows the
    house word (``成立：+1.6 ...``); see :mod:`.verdict_words`."""
    if not app.config.language or not is_chinese(app.config.language):
        return
    from docutils import nodes

    from .verdict_words import to_chinese

    for node in list(doctree.findall(nodes.inline)):
        if "pasted-text" not in node.get("classes", []):
            continue
        text = node.astext()
        chinese = to_chinese(text)
        if chinese != text:
            node.children = [nodes.Text(chinese)]


# --------------------------------------------------------------------------------------
# Exercise titles (sphinx-exercise)
# --------------------------------------------------------------------------------------
TITLE_MESSAGE = "title_message"
"""Attribute of an exercise node: its title's message (the directive's argument)."""


def exercise_title_message(argument: str) -> str:
    """The message id of an exercise title: the argument as Sphinx's gettext writes a
    node's source text (line breaks as spaces, stripped)."""
    return argument.replace("\n", " ").strip()


def _titled_exercise_directive(base, subtitle_class, title_class):
    """``base`` (sphinx-exercise's exercise directive), whose title's text is a message:
    the subtitle node (the argument) gets the argument as ``rawsource`` and the directive's
    source and line, which make it translatable; the title node around it ("Exercise" +
    the subtitle) is marked not translatable, so that it is no message of its own; and the
    exercise node keeps the message (:data:`TITLE_MESSAGE`) for the gettext builder."""

    class TitledExercise(base):
        def run(self):
            result = super().run()
            if not self.arguments:
                return result
            message = exercise_title_message(self.arguments[0])
            source, line = self.get_source_info()
            for node in result:
                for title in node.findall(title_class):
                    title["translatable"] = False
                for subtitle in node.findall(subtitle_class):
                    subtitle.rawsource, subtitle.source, subtitle.line = message, source, line
                    node[TITLE_MESSAGE] = message
            return result

    TitledExercise.__name__ = TitledExercise.__qualname__ = f"Titled{base.__name__}"
    return TitledExercise


def _exercise_titles_are_messages(app) -> None:
    """``builder-inited``: replace the ``exercise`` and ``exercise-start`` directives of
    sphinx-exercise (when the book uses it) by :func:`_titled_exercise_directive`."""
    if "sphinx_exercise" not in app.extensions:
        return
    from sphinx_exercise import directive
    from sphinx_exercise.nodes import exercise_subtitle, exercise_title

    for name, base in (("exercise", directive.ExerciseDirective),
                       ("exercise-start", directive.ExerciseStartDirective)):
        app.add_directive(name, _titled_exercise_directive(base, exercise_subtitle,
                                                           exercise_title), override=True)


def _translated_exercise_titles_for_solutions(app, doctree) -> None:
    """``doctree-read``: sphinx-exercise keeps a copy of each exercise, made before the
    page was translated, and titles the solution ("Solution to Exercise 2 (...)") from
    it; the copy is replaced by the exercise as read (translated in the Chinese edition)."""
    registry = getattr(app.env, "sphinx_exercise_registry", None)
    if not registry:
        return
    for node in _exercises(doctree):
        label = node.get("label")
        entry = registry.get(label)
        if entry is not None and entry.get("docname") == app.env.docname:
            entry["node"] = node.deepcopy()


@lru_cache(maxsize=1)
def _exercise_title_message_node():
    from docutils import nodes
    from sphinx import addnodes

    class ExerciseTitleMessage(nodes.Element, addnodes.translatable):
        """Carries an exercise title's message into the gettext builder's extraction
        (which reads the page after sphinx-exercise has rebuilt the title): inserted into
        the exercise node only while the gettext builder writes."""

        def preserve_original_messages(self) -> None:
            pass

        def apply_translated_message(self, original_message: str,
                                     translated_message: str) -> None:
            pass

        def extract_original_messages(self) -> list[str]:
            return [self[TITLE_MESSAGE]]

    return ExerciseTitleMessage


def _exercises(doctree) -> list:
    """The exercise nodes of ``doctree`` whose title is a message."""
    return [node for node in doctree.findall()
            if TITLE_MESSAGE in getattr(node, "attributes", {})]


def _exercise_titles_for_gettext(app, doctree, docname) -> None:
    """``doctree-resolved`` (gettext builder): each exercise title's message, where the
    title stands in the page."""
    from uuid import uuid4

    from sphinx.builders.gettext import MessageCatalogBuilder

    if not isinstance(app.builder, MessageCatalogBuilder):
        return
    message_node = _exercise_title_message_node()
    for node in _exercises(doctree):
        message = message_node(**{TITLE_MESSAGE: node[TITLE_MESSAGE]})
        message.source, message.line, message.uid = node.source, node.line, uuid4().hex
        node.insert(0, message)


def setup(app):
    _chinese_search_terms_as_a_set()
    app.connect("builder-inited", _exercise_titles_are_messages)
    app.connect("doctree-read", _translated_exercise_titles_for_solutions)
    app.connect("doctree-resolved", _exercise_titles_for_gettext)
    app.connect("doctree-read", _reattach_translated_nodes)
    app.add_transform(_table_cells_need_a_source())
    app.connect("doctree-read", _translate_toc_captions)
    app.connect("doctree-read", _verdict_words_in_chinese)
    app.connect("builder-inited", _share_glue_with_translations)
    app.connect("config-inited", _add_template_and_slot)
    app.add_css_file(STYLESHEET)
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
