"""Build the book in English and in Chinese from one source and one ``_config.yml``.

Commands (run from the repository root or any folder inside it)::

    python -m layernorm_tutorial.publishing.book_build [-W] [-n] [--keep-going] [--execute]
        Check the Chinese catalogs first (book title translated; no message untranslated,
        fuzzy or out of date with the sources: one line and exit status 2 otherwise), then
        build the English HTML in _build/html/ and the Chinese HTML in _build/html/zh/ side
        by side (two processes) from the outputs stored in the notebooks: nothing is
        executed. `pytest` re-executes every notebook and compares it with the stored
        outputs (nbval), so what the book shows is what the code produces.
        --execute: execute every notebook afresh instead (English edition, filling the
        execution cache _build/.jupyter_cache; the Chinese edition then reads that cache).
    python -m layernorm_tutorial.publishing.book_build html --lang {en,zh} [-W] [-n] [--keep-going]
        One edition only (zh: after the same checks).
    python -m layernorm_tutorial.publishing.book_build check
        Only the checks of the Chinese catalogs.
    python -m layernorm_tutorial.publishing.book_build gettext [--output DIR] [--force]
        Extract the English messages into .pot files (default _build/gettext), with
        notebook execution off: markdown cells are read as they are stored. Everything it
        writes stays under DIR, and only the .pot files remain there.
    python -m layernorm_tutorial.publishing.book_build update-po
        gettext, then ``sphinx-intl update``: new messages enter the .po catalogs empty,
        changed ones become fuzzy, deleted ones are dropped; then ``po_tool prefill``
        (messages without prose copied, interview titles swapped).

The Chinese edition differs from the English one only by the configuration overrides in
:func:`language_overrides`; everything else is read from ``_config.yml``. Errors a user can
fix (run outside the repository, catalogs not ready, an output folder that holds other files,
is a file, cannot be written, or is the repository or one of its source folders) end in one
line and exit status 2, before Sphinx starts. Ctrl-C ends in "interrupted" and exit status 130.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

from layernorm_tutorial.publishing._output_folders import OutputFolderError, check_output_folder

LANGUAGES = {"en": "", "zh": "zh_CN"}
"""Edition name -> Sphinx language code ("" = the source language, English)."""

ZH_SUBDIR = "zh"
LOCALE_DIR = "locales"
GLOSSARY = Path("book") / "glossary.md"
LAYOUT = "_config.yml and _toc.yml (with book/ and locales/ beside them)"


class BuildError(Exception):
    """A problem the user can fix (wrong folder, catalogs not ready, a bad output folder):
    :func:`main` prints it in one line and exits with status 2."""


def _output_folder(path: Path, option: str, root: Path) -> Path:
    """``path`` resolved, or :class:`BuildError` if it is no place for outputs (a file, not
    writable, the repository or one of its source folders; see ``_output_folders``)."""
    try:
        return check_output_folder(path, option=option, root=root)
    except OutputFolderError as exc:
        raise BuildError(str(exc)) from None


def repo_root() -> Path:
    """The directory holding ``_config.yml`` and ``_toc.yml`` (the current directory or one
    of its parents). Raises :class:`BuildError` naming the expected layout."""
    from layernorm_tutorial.publishing.book_i18n.catalogs import book_root

    root = book_root()
    if root is None:
        raise BuildError(
            f"{Path.cwd()} is not inside the book's repository: expected {LAYOUT} here or in "
            "a parent folder; run `python -m layernorm_tutorial.publishing.book_build` from "
            "the repository root")
    return root


def html_dir(build: Path, lang: str) -> Path:
    """Where an edition's HTML goes: ``<build>/html`` (en) or ``<build>/html/zh`` (zh)."""
    return build / "html" if lang == "en" else build / "html" / ZH_SUBDIR


def catalog_dir(root: Path, lang: str = "zh") -> Path:
    """The folder of an edition's catalogs: ``locales/<code>/LC_MESSAGES``."""
    return root / LOCALE_DIR / LANGUAGES[lang] / "LC_MESSAGES"


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


def _root_catalog(root: Path, lang: str) -> Path:
    import yaml

    toc_root = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf8"))["root"]
    return catalog_dir(root, lang) / f"{toc_root}.po"


def translated_title_and_author(root: Path, lang: str) -> dict:
    """``html_title`` (header, ``<title>``), ``author`` (footer) and the other
    :data:`EDITION_STRINGS` of the ``lang`` edition.

    The book's title in ``_config.yml`` is the root page's heading, so its translation is
    read from the root page's catalog; a title missing there is an error (ValueError naming
    the catalog), not English text left in every page of the translated edition."""
    import yaml

    from layernorm_tutorial.publishing.book_i18n import catalogs

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf8"))
    po = _root_catalog(root, lang)
    rows = catalogs.entries(po) if po.is_file() else []
    translations = {e.msgid: e.msgstr for e in rows if not e.fuzzy and e.msgstr.strip()}
    title = translations.get(config["title"])
    if not title:
        shown = po.relative_to(root) if po.is_relative_to(root) else po
        raise ValueError(f"the book title {config['title']!r} of _config.yml has no "
                         f"translation in {shown}: run update-po and translate it")
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


# --------------------------------------------------------------------------------------
# The checks of the Chinese catalogs, before any build
# --------------------------------------------------------------------------------------
def _listed(items: list[str], limit: int = 6) -> str:
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def unfinished_translations(root: Path, lang: str = "zh") -> list[str]:
    """One line per problem that stops the ``lang`` edition, read from the catalogs alone
    (a second): the book title untranslated, catalogs with untranslated or fuzzy messages."""
    from layernorm_tutorial.publishing.book_i18n import catalogs

    folder = catalog_dir(root, lang)
    files = catalogs.catalog_files(root / LOCALE_DIR, LANGUAGES[lang])
    if not files:
        return [f"no catalogs in {folder.relative_to(root)}: run `python -m "
                "layernorm_tutorial.publishing.book_build update-po`, then translate"]
    problems = []
    try:
        translated_title_and_author(root, lang)
    except ValueError as exc:
        problems.append(str(exc))
    unfinished = []
    for po in files:
        rows = catalogs.entries(po)
        untranslated = sum(1 for e in rows if not e.msgstr.strip())
        fuzzy = sum(1 for e in rows if e.fuzzy and e.msgstr.strip())
        counts = [f"{n} {what}" for n, what in ((untranslated, "untranslated"),
                                                 (fuzzy, "fuzzy")) if n]
        if counts:
            unfinished.append(f"{po.relative_to(root)} ({', '.join(counts)})")
    if unfinished:
        problems.append(f"messages to translate in {_listed(unfinished)}: list them with "
                        "`python -m layernorm_tutorial.publishing.book_i18n.po_tool todo "
                        "CATALOG -o todo.json`")
    return problems


def stale_catalogs(root: Path, pot_dir: Path, lang: str = "zh") -> list[str]:
    """Pages whose catalog differs from the messages just extracted into ``pot_dir``
    (new or obsolete messages, or no catalog at all), one entry per page."""
    from layernorm_tutorial.publishing.book_i18n import catalogs

    folder = catalog_dir(root, lang)
    pots = {p.relative_to(pot_dir).with_suffix("").as_posix(): p for p in pot_dir.rglob("*.pot")}
    pos = {p.relative_to(folder).with_suffix("").as_posix(): p
           for p in catalogs.catalog_files(root / LOCALE_DIR, LANGUAGES[lang])}
    stale = [f"{page} (no catalog)" for page in sorted(pots.keys() - pos.keys())]
    stale += [f"{page} (catalog of a page that no longer exists)"
              for page in sorted(pos.keys() - pots.keys())]
    for page in sorted(pots.keys() & pos.keys()):
        source, catalog = catalogs.message_ids(pots[page]), catalogs.message_ids(pos[page])
        counts = [f"{n} {what}" for n, what in ((len(source - catalog), "new"),
                                                 (len(catalog - source), "obsolete")) if n]
        if counts:
            stale.append(f"{page} ({', '.join(counts)} message(s))")
    return stale


def check_translations(root: Path, build: Path, lang: str = "zh") -> None:
    """Raise :class:`BuildError` (one line) unless the ``lang`` catalogs are complete and up
    to date with the sources. Runs before any build: the catalogs themselves first (a
    second), then the messages of the sources (the gettext extraction, execution off)."""
    problems = unfinished_translations(root, lang)
    if not problems:
        work = build / ".translation-check"
        shutil.rmtree(work, ignore_errors=True)
        try:
            status = extract_messages(root, work, quiet=True, really_quiet=True)
            if status:
                raise BuildError(f"extracting the English messages failed (exit status "
                                 f"{status}): run `python -m layernorm_tutorial.publishing."
                                 "book_build gettext` to see why")
            stale = stale_catalogs(root, work, lang)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if stale:
            problems.append(f"catalogs out of date with the sources: {_listed(stale)}: run "
                            "`python -m layernorm_tutorial.publishing.book_build update-po`, "
                            "then translate")
    if problems:
        raise BuildError(f"the {'Chinese' if lang == 'zh' else lang} edition is not ready "
                         f"(nothing was built): {' | '.join(problems)}. "
                         "The English edition alone: `python -m "
                         "layernorm_tutorial.publishing.book_build html --lang en`")


# --------------------------------------------------------------------------------------
# Sphinx
# --------------------------------------------------------------------------------------
def _import_jupyter_book_sphinx():
    # jsonschema (imported by jupyter-book to validate _config.yml) builds the grammars of
    # rfc3987_syntax when that optional package is installed (jupyter_events pulls it in):
    # 3 s of CPU per process for the "iri" format, which jupyter-book's schema never uses.
    # Marking it absent makes jsonschema skip that checker, as it does when it is missing.
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)
    from jupyter_book.sphinx import build_sphinx

    return build_sphinx


QUIET_WARNINGS = (
    # sphinx_external_toc's collectors.py runs isinstance() over every object of the
    # garbage collector, which touches torch's deprecated alias (torch is imported by the
    # book's extensions) and prints this on every build; it says nothing about the book.
    (FutureWarning, r"`?torch\.distributed\.reduce_op`? is deprecated"),
)
"""(category, message pattern) of the warnings silenced during a Sphinx run."""


def _build(root: Path, builder: str, outdir: Path, doctrees: Path, overrides: dict,
           strict: bool, nitpicky: bool, keep_going: bool, quiet: bool = False,
           really_quiet: bool = False) -> int:
    build_sphinx = _import_jupyter_book_sphinx()

    overrides = {"external_toc_path": (root / "_toc.yml").as_posix(),
                 "latex_individualpages": False, **overrides}
    if nitpicky:
        overrides["nitpicky"] = True
    with warnings.catch_warnings():
        for category, pattern in QUIET_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern, category=category)
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
            quiet=quiet,
            really_quiet=really_quiet,
        )
    # Sphinx returns (not raises) what stopped it, Ctrl-C's KeyboardInterrupt included.
    if isinstance(result, KeyboardInterrupt):
        raise KeyboardInterrupt
    if isinstance(result, BaseException):
        print(f"{builder} build failed: {result}", file=sys.stderr)
        return 1
    return int(result)


def build_html(root: Path, lang: str, build: Path | None = None, strict: bool = False,
               nitpicky: bool = False, keep_going: bool = False,
               execute: bool = False) -> int:
    """Build one edition's HTML into ``build`` (default ``_build``); return Sphinx's exit
    status (0 = success). By default the notebooks' stored outputs are shown (``_config.yml``:
    ``execute_notebooks: "off"``; ``pytest`` checks them against a fresh execution);
    ``execute``: execute them through the cache in ``<build>/.jupyter_cache`` instead."""
    build = build or root / "_build"
    doctrees = build / (".doctrees" if lang == "en" else f".doctrees-{lang}")
    try:
        overrides = language_overrides(root, lang, build)
    except ValueError as exc:
        raise BuildError(str(exc)) from None
    overrides["nb_execution_cache_path"] = str(build / ".jupyter_cache")
    if execute:
        overrides["nb_execution_mode"] = "cache"
    status = _build(root, "html", html_dir(build, lang), doctrees, overrides,
                    strict, nitpicky, keep_going)
    if status == 0:
        print(f"{lang} edition: {html_dir(build, lang) / 'index.html'}")
        if lang != "en":
            write_translated_notebooks(root, build, lang)
    return status


def write_translated_notebooks(root: Path, build: Path, lang: str = "zh") -> Path:
    """The edition's notebooks (``<build>/<lang>_notebooks/book``, a copy of ``book/``
    in that language, generated from the English sources and the catalogs) and, in the
    edition's HTML, each chapter's download button pointing to its translated notebook."""
    from layernorm_tutorial.publishing.book_i18n.notebooks import write_chinese_book

    folder = build / f"{lang}_notebooks" / "book"
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_chinese_book(root, folder, force=True, option="--build-dir")
    except OutputFolderError as exc:
        raise BuildError(str(exc)) from None
    sources = html_dir(build, lang) / "_sources" / "book"
    replaced = 0
    for notebook in sorted(folder.glob("*.ipynb")):
        shipped = sources / notebook.name
        if shipped.is_file():
            shutil.copyfile(notebook, shipped)
            replaced += 1
    print(f"{lang} notebooks: {folder} ({replaced} download buttons point to them)")
    return folder


def extract_messages(root: Path, output: Path, force: bool = False,
                     quiet: bool = False, really_quiet: bool = False) -> int:
    """Write one .pot catalog per page into ``output`` (notebooks are not executed).

    Sphinx's own files (doctrees, myst-nb's ``jupyter_execute``, the static files) go to a
    hidden working folder inside ``output`` that is removed afterwards, so nothing is
    written beside ``output`` and only the .pot files remain. The .pot files of an earlier
    extraction are replaced (those of deleted pages removed). An ``output`` folder that
    holds anything but .pot files is refused without ``force``; with ``force`` its .pot
    files of the same names are replaced and nothing else in it is removed."""
    output = _output_folder(output, "--output", root)
    work = output / ".sphinx-gettext"  # Sphinx's own files (a killed run may leave it)
    others = [p for p in output.rglob("*") if p.is_file() and p.suffix != ".pot"
              and work not in p.parents] if output.is_dir() else []
    if others and not force:
        raise BuildError(f"--output {output}: holds other files than .pot catalogs (e.g. "
                         f"{others[0].relative_to(output)}); choose an empty or new "
                         "folder, or pass --force")
    shutil.rmtree(work, ignore_errors=True)
    try:
        status = _build(root, "gettext", work / "pot", work / "doctrees",
                        {"nb_execution_mode": "off"}, strict=False, nitpicky=False,
                        keep_going=False, quiet=quiet, really_quiet=really_quiet)
        if status == 0:
            for old in output.rglob("*.pot") if not others else ():
                if work not in old.parents:  # a folder of .pot files only: ours, replaced
                    old.unlink()
            pot_root = work / "pot"
            for pot in pot_root.rglob("*.pot"):
                if "_static" in pot.relative_to(pot_root).parts:
                    continue
                target = output / pot.relative_to(pot_root)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(pot, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return status


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


# --------------------------------------------------------------------------------------
# Both editions
# --------------------------------------------------------------------------------------
def _build_both_in_parallel(root: Path, build: Path, args) -> int:
    """The Chinese edition in a second process while this one builds the English edition
    (stored outputs: the two builds share nothing but the read-only sources, so two cores
    build both in about the time of one). The English log streams; the Chinese one is kept
    in ``<build>/zh-build.log`` and printed at the end."""
    flags = [*(["-W"] if args.strict else []), *(["-n"] if args.nitpicky else []),
             *(["--keep-going"] if args.keep_going else []), "--build-dir", str(build),
             "--no-translation-check"]
    build.mkdir(parents=True, exist_ok=True)
    log = build / "zh-build.log"
    with open(log, "wb") as handle:
        chinese = subprocess.Popen(
            [sys.executable, "-m", "layernorm_tutorial.publishing.book_build", "html",
             "--lang", "zh", *flags], cwd=root, stdout=handle, stderr=subprocess.STDOUT)
    print(f"building the Chinese edition in a second process (log: {log})", flush=True)
    try:
        english = build_html(root, "en", build, args.strict, args.nitpicky, args.keep_going)
        status = chinese.wait()
    except BaseException:  # Ctrl-C (or an error) here: the Chinese build stops too
        chinese.kill()
        chinese.wait()
        raise
    print(f"---- zh edition ({log}) ----\n"
          f"{log.read_text(encoding='utf8', errors='replace')}", flush=True)
    return english or status


def _build_one_after_the_other(root: Path, build: Path, args) -> int:
    """``--execute``: the English edition executes every notebook (fresh cache unless
    ``--reuse-cache``), then the Chinese edition reads the outputs from that cache."""
    if not args.reuse_cache:
        # The cache cannot see changes to the package: execute every notebook afresh.
        shutil.rmtree(build / ".jupyter_cache", ignore_errors=True)
    failed = 0
    for lang in ("en", "zh"):
        status = build_html(root, lang, build, args.strict, args.nitpicky, args.keep_going,
                            execute=True)
        failed = failed or status
        if status and not args.keep_going:
            break  # with --keep-going, the Chinese edition reports its warnings too
    return failed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.publishing.book_build",
        description="Build the English and Chinese editions of the book.",
    )
    parser.add_argument("command", nargs="?", default="all",
                        choices=["all", "html", "check", "gettext", "update-po"])
    parser.add_argument("--lang", choices=sorted(LANGUAGES), default="en",
                        help="edition for the `html` command")
    parser.add_argument("-W", dest="strict", action="store_true",
                        help="turn warnings into errors")
    parser.add_argument("-n", dest="nitpicky", action="store_true",
                        help="warn about every missing reference")
    parser.add_argument("--keep-going", action="store_true",
                        help="with -W, report every warning before failing")
    parser.add_argument("--execute", action="store_true",
                        help="execute every notebook (a maintainer's check; slow) instead of "
                        "showing the outputs stored in them")
    parser.add_argument("--reuse-cache", action="store_true",
                        help="with --execute: keep the execution cache of an earlier build "
                        "(outputs may be stale after a change to the package)")
    parser.add_argument("--output", type=Path, default=None,
                        help="folder for the .pot files of the `gettext` command")
    parser.add_argument("--force", action="store_true",
                        help="`gettext`: write into an --output folder that holds other files")
    parser.add_argument("--build-dir", type=Path, default=None,
                        help="build folder instead of _build (html goes to BUILD_DIR/html)")
    parser.add_argument("--no-translation-check", action="store_true",
                        help=argparse.SUPPRESS)  # the parallel builds: checked already
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except BuildError as exc:
        print(f"book_build: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("book_build: interrupted", file=sys.stderr)
        return 130


def _checked_build_dir(root: Path, args, builds_chinese: bool) -> Path:
    """The build folder resolved, after the checks of every folder the command writes
    (build folder, HTML folders, Chinese notebooks) before any work: BuildError if one is
    no place for outputs, or if the Chinese notebooks' folder exists and the book build did
    not make it."""
    from layernorm_tutorial.publishing.book_i18n.notebooks import check_out_folder

    build = _output_folder(args.build_dir or root / "_build", "--build-dir", root)
    langs = {"all": ("en", "zh"), "html": (args.lang,)}.get(args.command, ())
    for lang in langs:
        _output_folder(html_dir(build, lang), "--build-dir", root)
    if builds_chinese and args.command != "check":
        try:
            check_out_folder(root, build / "zh_notebooks" / "book", force=True,
                             option="--build-dir")
        except OutputFolderError as exc:
            raise BuildError(str(exc)) from None
    return build


def _run(args) -> int:
    root = repo_root()
    if args.output is not None and args.command != "gettext":
        raise BuildError(f"--output is for the gettext command; {args.command} writes "
                         "to --build-dir")
    if args.command == "gettext":
        return extract_messages(root, args.output or root / "_build" / "gettext",
                                force=args.force)
    if args.command == "update-po":
        return update_catalogs(root)
    start_wall, start_cpu = time.perf_counter(), _cpu_seconds()
    builds_chinese = args.command == "all" or (args.command == "html" and args.lang == "zh")
    build = _checked_build_dir(root, args, builds_chinese)
    if args.command == "check" or (builds_chinese and not args.no_translation_check):
        check_translations(root, build)
        print(f"Chinese catalogs complete and up to date with the sources "
              f"({time.perf_counter() - start_wall:.0f} s)", flush=True)
    if args.command == "check":
        return 0
    if args.command == "html":
        return build_html(root, args.lang, build, args.strict, args.nitpicky, args.keep_going,
                          execute=args.execute)
    if args.execute:
        failed = _build_one_after_the_other(root, build, args)
    else:
        failed = _build_both_in_parallel(root, build, args)
    print(f"both editions: {time.perf_counter() - start_wall:.0f} s wall, "
          f"{_cpu_seconds() - start_cpu:.0f} s CPU (this process and its children)")
    return failed


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    usage = os.times()
    return usage.user + usage.system + usage.children_user + usage.children_system


if __name__ == "__main__":
    sys.exit(main())
