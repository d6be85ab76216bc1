"""Build the book in English and in Chinese from one source and one ``_config.yml``.

Commands (run from the repository root)::

    python -m layernorm_tutorial.publishing.book_build [-W] [-n] [--keep-going]
        English HTML in _build/html/ (executes every notebook, filling the execution cache
        _build/.jupyter_cache), then Chinese HTML in _build/html/zh/ (translations from
        locales/zh_CN/LC_MESSAGES/*.po; notebook outputs come from that cache, so nothing
        is executed twice).
    python -m layernorm_tutorial.publishing.book_build html --lang {en,zh} [-W] [-n] [--keep-going]
        One edition only.
    python -m layernorm_tutorial.publishing.book_build gettext [--output DIR]
        Extract the English messages into .pot files (default _build/gettext), with
        notebook execution off: markdown cells are read as they are stored.
    python -m layernorm_tutorial.publishing.book_build update-po
        gettext, then ``sphinx-intl update``: new messages enter the .po catalogs empty,
        changed ones become fuzzy, deleted ones are dropped; then ``po_tool prefill``
        (messages without prose copied, interview titles swapped).

The Chinese edition differs from the English one only by the configuration overrides in
:func:`language_overrides`; everything else is read from ``_config.yml``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

LANGUAGES = {"en": "", "zh": "zh_CN"}
"""Edition name -> Sphinx language code ("" = the source language, English)."""

ZH_SUBDIR = "zh"
LOCALE_DIR = "locales"
GLOSSARY = Path("book") / "glossary.md"


def repo_root() -> Path:
    """The directory holding ``_config.yml`` (the current directory or one of its parents)."""
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "_config.yml").is_file() and (candidate / "_toc.yml").is_file():
            return candidate
    raise FileNotFoundError(
        "no _config.yml and _toc.yml in the current directory or its parents: "
        "run `python -m layernorm_tutorial.publishing.book_build` from the repository root"
    )


def html_dir(build: Path, lang: str) -> Path:
    """Where an edition's HTML goes: ``<build>/html`` (en) or ``<build>/html/zh`` (zh)."""
    return build / "html" if lang == "en" else build / "html" / ZH_SUBDIR


def write_search_dictionary(root: Path, build: Path) -> Path:
    """The glossary's Chinese terms as a jieba user dictionary in ``build``."""
    from layernorm_tutorial.publishing.book_i18n.catalogs import glossary_terms, search_dictionary

    path = build / "zh_search_terms.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(search_dictionary(glossary_terms(root / GLOSSARY)), encoding="utf8")
    return path


EDITION_STRINGS = {
    "zh": {
        "author": "layernorm_tutorial 作者团队",
        "nb_code_prompt_show": "显示隐藏的代码单元格内容",
        "nb_code_prompt_hide": "隐藏代码单元格内容",
        "togglebutton_hint": "点击展开",
        "togglebutton_hint_hide": "点击收起",
    },
}
"""Sphinx settings that hold English words, per translated edition: the ``author`` of
``_config.yml`` (page footers), myst-nb's toggle of hidden cell parts (English default
"Show code cell {type}", where ``{type}`` would stay English too) and sphinx-togglebutton's
hint on the dropdowns ("Click to show": its own translation is looked up when the extension
loads, before the language is known)."""


def translated_title_and_author(root: Path, lang: str) -> dict:
    """``html_title`` (header, ``<title>``), ``author`` (footer) and the other
    :data:`EDITION_STRINGS` of the ``lang`` edition.

    The book's title in ``_config.yml`` is the root page's heading, so its translation is
    read from the root page's catalog; a title missing there is an error, not English text
    left in every page of the translated edition."""
    import yaml

    from layernorm_tutorial.publishing.book_i18n import catalogs

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf8"))
    toc_root = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf8"))["root"]
    po = root / LOCALE_DIR / LANGUAGES[lang] / "LC_MESSAGES" / f"{toc_root}.po"
    translations = {e.msgid: e.msgstr for e in catalogs.entries(po) if not e.fuzzy}
    title = translations.get(config["title"])
    if not title:
        raise ValueError(f"the book title {config['title']!r} of _config.yml has no "
                         f"translation in {po}: run update-po and translate it")
    return {"html_title": title, "project": title, **EDITION_STRINGS[lang]}


def language_overrides(root: Path, lang: str, build: Path) -> dict:
    """The Sphinx settings that make the ``lang`` edition (on top of ``_config.yml``)."""
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {sorted(LANGUAGES)}, got {lang!r}")
    if lang == "en":
        return {}
    return {
        "language": LANGUAGES[lang],
        "locale_dirs": [str(root / LOCALE_DIR)],
        **translated_title_and_author(root, lang),
        # The book's own terms (层归一化, 批量归一化, ...) as whole search words: the
        # tokenizer (jieba, Sphinx's Chinese search splitter) would otherwise index only
        # their parts (层 + 归一化), and a search for 层归一化 would find nothing.
        "html_search_options": {"dict": str(write_search_dictionary(root, build))},
    }


def _build(root: Path, builder: str, outdir: Path, doctrees: Path, overrides: dict,
           strict: bool, nitpicky: bool, keep_going: bool) -> int:
    from jupyter_book.sphinx import build_sphinx

    overrides = {"external_toc_path": (root / "_toc.yml").as_posix(),
                 "latex_individualpages": False, **overrides}
    if nitpicky:
        overrides["nitpicky"] = True
    result = build_sphinx(
        root,
        outdir,
        noconfig=True,
        path_config=str(root / "_config.yml"),
        confoverrides=overrides,
        doctreedir=doctrees,
        builder=builder,
        warningiserror=strict,
        keep_going=keep_going,
    )
    if isinstance(result, Exception):
        print(f"{builder} build failed: {result}", file=sys.stderr)
        return 1
    return int(result)


def build_html(root: Path, lang: str, build: Path | None = None, strict: bool = False,
               nitpicky: bool = False, keep_going: bool = False,
               stored_outputs: bool = False) -> int:
    """Build one edition's HTML into ``build`` (default ``_build``); return Sphinx's exit
    status (0 = success). ``stored_outputs``: show the outputs stored in the notebooks
    instead of executing them (a quick preview; never what CI publishes)."""
    build = build or root / "_build"
    doctrees = build / (".doctrees" if lang == "en" else f".doctrees-{lang}")
    overrides = language_overrides(root, lang, build)
    overrides["nb_execution_cache_path"] = str(build / ".jupyter_cache")
    if stored_outputs:
        overrides["nb_execution_mode"] = "off"
    status = _build(root, "html", html_dir(build, lang), doctrees, overrides,
                    strict, nitpicky, keep_going)
    if status == 0:
        print(f"{lang} edition: {html_dir(build, lang) / 'index.html'}")
    return status


def extract_messages(root: Path, output: Path) -> int:
    """Write one .pot catalog per page into ``output`` (notebooks are not executed)."""
    doctrees = output.parent / f".doctrees-{output.name}"
    shutil.rmtree(doctrees, ignore_errors=True)
    return _build(root, "gettext", output, doctrees, {"nb_execution_mode": "off"},
                  strict=False, nitpicky=False, keep_going=False)


def update_catalogs(root: Path) -> int:
    """Re-extract the messages and merge them into ``locales/zh_CN/LC_MESSAGES``."""
    pot_dir = root / "_build" / "gettext"
    shutil.rmtree(pot_dir, ignore_errors=True)
    status = extract_messages(root, pot_dir)
    if status:
        return status
    status = subprocess.call(
        [sys.executable, "-m", "sphinx_intl", "update", "-p", str(pot_dir),
         "-d", str(root / LOCALE_DIR), "-l", LANGUAGES["zh"]],
        cwd=root,
    )
    if status:
        return status
    # Messages without prose are copied, the interview titles swapped (see po_tool).
    return subprocess.call(
        [sys.executable, "-m", "layernorm_tutorial.publishing.book_i18n.po_tool", "prefill"],
        cwd=root
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.publishing.book_build",
        description="Build the English and Chinese editions of the book.",
    )
    parser.add_argument("command", nargs="?", default="all",
                        choices=["all", "html", "gettext", "update-po"])
    parser.add_argument("--lang", choices=sorted(LANGUAGES), default="en",
                        help="edition for the `html` command")
    parser.add_argument("-W", dest="strict", action="store_true",
                        help="turn warnings into errors")
    parser.add_argument("-n", dest="nitpicky", action="store_true",
                        help="warn about every missing reference")
    parser.add_argument("--keep-going", action="store_true",
                        help="with -W, report every warning before failing")
    parser.add_argument("--output", type=Path, default=None,
                        help="folder for the .pot files of the `gettext` command")
    parser.add_argument("--build-dir", type=Path, default=None,
                        help="build folder instead of _build (html goes to BUILD_DIR/html)")
    parser.add_argument("--reuse-cache", action="store_true",
                        help="`all`: keep the execution cache of an earlier build (outputs may "
                        "be stale after a change to the package)")
    parser.add_argument("--stored-outputs", action="store_true",
                        help="show the outputs stored in the notebooks, execute nothing "
                        "(a quick preview)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = repo_root()
    build = (args.build_dir or root / "_build").resolve()
    flags = {"build": build, "strict": args.strict, "nitpicky": args.nitpicky,
             "keep_going": args.keep_going, "stored_outputs": args.stored_outputs}
    if args.command == "gettext":
        return extract_messages(root, (args.output or root / "_build" / "gettext").resolve())
    if args.command == "update-po":
        return update_catalogs(root)
    if args.command == "html":
        return build_html(root, args.lang, **flags)
    if not args.reuse_cache:
        # Execute every notebook afresh for the English edition (the cache cannot see
        # changes to the package); the Chinese edition then reads the fresh cache.
        shutil.rmtree(build / ".jupyter_cache", ignore_errors=True)
    failed = 0
    for lang in ("en", "zh"):
        start_wall, start_cpu = time.perf_counter(), _cpu_seconds()
        status = build_html(root, lang, **flags)
        print(f"{lang} edition: {time.perf_counter() - start_wall:.0f} s wall, "
              f"{_cpu_seconds() - start_cpu:.0f} s CPU (this process and the kernels)")
        failed = failed or status
        if status and not args.keep_going:
            break  # with --keep-going, the Chinese edition reports its warnings too
    return failed


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the kernels)."""
    usage = os.times()
    return usage.user + usage.system + usage.children_user + usage.children_system


if __name__ == "__main__":
    sys.exit(main())
