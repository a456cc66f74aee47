from textkit.slug import slugify, to_ascii, unique_slug
from textkit.template import render


def test_accents_are_removed():
    assert slugify("Crème Brûlée, 2 Ways!") == "creme-brulee-2-ways"
    assert slugify("Señor Müller") == "senor-muller"
    assert slugify("Ångström") == "angstrom"
    assert slugify("Ça va? Très bien", sep="_") == "ca_va_tres_bien"
    assert slugify("Zürich Café", lowercase=False) == "Zurich-Cafe"


def test_to_ascii_keeps_base_letters():
    assert to_ascii("Crème") == "Creme"
    assert to_ascii("naïve façade") == "naive facade"
    assert to_ascii("Dvořák") == "Dvorak"


def test_unique_slug_with_accents():
    assert unique_slug("Résumé", {"resume"}) == "resume-2"
    assert slugify("Élégance éternelle", max_length=9) == "elegance"


def test_slug_filter_with_accents():
    assert render("/blog/{{ title|slug }}", title="Crème Brûlée") == "/blog/creme-brulee"


def test_transliterated_letters():
    assert slugify("Straße") == "strasse"
    assert slugify("Ærø & Øresund") == "aero-and-oresund"
    assert to_ascii("Łódź")[:1] == "L"


def test_scripts_without_ascii_letters_are_dropped():
    assert slugify("東京 2024") == "2024"
    assert slugify("Привет") == ""
