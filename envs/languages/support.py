"""What the importers of other formats need of the language plug-ins (`tasks/multilingual.py`)."""

from __future__ import annotations

from envs.languages import LANGUAGES, language_named
from envs.process_grading import ProcessLanguage
from tasks.multilingual import LanguageSupport


def import_support() -> LanguageSupport:
    """Every plug-in's suffixes and test command; for those whose tests are programs, how a test file's
    tests are named and which paths are test files (a dataset's test ids are placed by them)."""
    support = LanguageSupport(suffixes={})
    for name in LANGUAGES:
        language = language_named(name)
        support.suffixes[name] = language.suffixes
        support.test_command[name] = language.test_command
        if isinstance(language, ProcessLanguage):
            support.tests_in[name] = language.tests_in
            support.is_test[name] = language.is_test_file
    return support
