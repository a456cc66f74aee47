import pytest
from textkit.template import Template, TemplateError, render

ITEMS = [{"name": "tea"}, {"name": "scones"}]


def test_index_past_the_end_in_strict_mode():
    with pytest.raises(TemplateError, match=r"undefined name 'items\.2\.name'"):
        render("{{ items.2.name }}", items=ITEMS)
    with pytest.raises(TemplateError, match=r"undefined name 'items\.5'"):
        render("{{ items.5|upper }}", items=ITEMS)
    with pytest.raises(TemplateError, match=r"undefined name 'order\.lines\.0'"):
        render("{{ order.lines.0 }}", order={"lines": ()})


def test_index_past_the_end_renders_empty_when_not_strict():
    template = Template("1. {{ items.0.name }} 2. {{ items.1.name }} 3. {{ items.2.name }}", strict=False)
    assert template.render(items=ITEMS) == "1. tea 2. scones 3. "
    assert template.render(items=[]) == "1.  2.  3. "


def test_index_past_the_end_with_default():
    assert render('{{ items.2.name|default:"-" }}', items=ITEMS) == "-"


def test_existing_indexes():
    assert render("{{ items.1.name|title }}", items=ITEMS) == "Scones"
    assert render("{{ grid.1.0 }}", grid=[[1, 2], [3, 4]]) == "3"
    assert render("{{ pair.0 }}", pair=("a", "b")) == "a"


def test_missing_keys_and_attributes():
    with pytest.raises(TemplateError, match=r"undefined name 'user\.email'"):
        render("{{ user.email }}", user={"name": "x"})
    with pytest.raises(TemplateError, match=r"undefined name 'text\.nope'"):
        render("{{ text.nope }}", text="abc")
    assert Template("[{{ user.email }}]", strict=False).render(user={}) == "[]"
