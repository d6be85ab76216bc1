"""Publishing: the tools that build the book and its study aids. Nothing here is numerics.

``book_build``      builds both editions (English, Chinese) and updates the translation catalogs
``book_i18n``       the Chinese edition: Sphinx extension, catalog checks, the translators' tool
``flashcards``      the Anki deck made from the interview chapters (``flashcard_html`` renders it)

Rules (enforced by import-linter): publishing may import anything in the package; nothing in
the library or the lab imports publishing.
"""
