"""Checkers for the book's exercises and interview drills, one module per chapter.

Each checker runs a reader's function against the package's reference implementation on
random inputs and edge cases and returns a result whose message names the mistake.
"""
