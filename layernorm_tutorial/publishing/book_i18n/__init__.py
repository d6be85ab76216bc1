"""The book's Chinese edition: build-time Sphinx extension and translation-catalog tools.

sphinx_ext  the language switch on every page and ``<html lang>`` (listed in _config.yml)
catalogs    reading the .po catalogs and the checks the tests run on them
po_tool     command line for translators: list untranslated entries as JSON, write them back
"""
