import pytest
from textkit.template import Template, TemplateError, render


def test_default_for_undefined_names():
    assert render('Hi {{ nickname|default:"friend" }}!') == "Hi friend!"
    assert render('Hi {{ user.nickname|default:"friend" }}!', user={"name": "Ada"}) == "Hi friend!"
    assert render('{{ rows.5|default:"none" }}', rows=["a"]) == "none"
    assert Template('{{ x|default:"y" }}', strict=False).render() == "y"


def test_default_for_none_and_empty_string():
    assert render('{{ name|default:"anon" }}', name=None) == "anon"
    assert render("{{ name|default:'anon' }}", name="") == "anon"


def test_default_keeps_other_values():
    assert render('{{ name|default:"anon" }}', name="Grace") == "Grace"
    assert render('{{ n|default:"none" }}', n=0) == "0"
    assert render('{{ flag|default:"none" }}', flag=False) == "False"
    assert render('{{ text|default:"none" }}', text=" ") == " "


def test_default_arguments():
    assert render("{{ count|default:0 }}") == "0"
    assert render("{{ ratio|default:1.5 }}") == "1.5"
    assert render("[{{ missing|default }}]") == "[]"
    assert render('{{ a|default:"x | y" }}') == "x | y"


def test_default_in_a_chain():
    assert render('{{ name|default:"anon"|upper }}') == "ANON"
    assert render('{{ name|strip|default:"anon" }}', name="  ") == "anon"
    assert render('{{ tags|default:""|length }}', tags=["a", "b"]) == "2"


def test_undefined_without_default_still_raises():
    with pytest.raises(TemplateError, match="undefined name 'nickname'"):
        render("Hi {{ nickname }}!")
    with pytest.raises(TemplateError, match="undefined name 'nickname'"):
        render("Hi {{ nickname|upper }}!")
    assert Template("[{{ nickname }}]", strict=False).render() == "[]"


def test_other_filters_still_work():
    assert render("{{ name|title }} {{ n }}", name="ada lovelace", n=3) == "Ada Lovelace 3"
    with pytest.raises(TemplateError, match="unknown filter 'shout'"):
        render("{{ name|shout }}", name="x")
