import pytest
from textkit.template import Template, TemplateError, render


def test_render_names_and_filters():
    assert render("Hello {{ name }}!", name="Ada") == "Hello Ada!"
    assert render("{{ user.name|title }}", {"user": {"name": "ada lovelace"}}) == "Ada Lovelace"
    assert render("{{ rows.1|upper }}", rows=["a", "b"]) == "B"
    assert render("{{ tags|join:' / ' }} ({{ tags|length }})", tags=["x", "y"]) == "x / y (2)"
    assert render("{{ html|escape }}", html="<b>") == "&lt;b&gt;"


def test_filter_chain_and_arguments():
    assert render("{{ t|truncate:12|upper }}", t="The quick brown fox") == "THE QUICK…"
    assert render("{{ cls|snake }} {{ cls|kebab }}", cls="HTTPServer") == "http_server http-server"
    assert render("{{ title|slug }}", title="Hello, World") == "hello-world"


def test_attributes():
    class User:
        name = "Grace"

    assert render("{{ user.name }}", user=User()) == "Grace"


def test_undefined_names():
    with pytest.raises(TemplateError, match="undefined name 'missing'"):
        render("{{ missing }}")
    with pytest.raises(TemplateError, match=r"undefined name 'user\.email'"):
        render("{{ user.email }}", user={"name": "x"})
    assert Template("[{{ missing|upper }}]", strict=False).render() == "[]"


def test_parse_errors():
    with pytest.raises(TemplateError, match="unknown filter 'shout'"):
        Template("{{ name|shout }}")
    with pytest.raises(TemplateError, match="unclosed tag at offset 3"):
        Template("hi {{ name")
    with pytest.raises(TemplateError, match="bad name"):
        Template("{{ 1abc }}")


def test_escaped_tag_and_custom_filter():
    assert render(r"\{{ name }} is {{ name }}", name="x") == "{{ name }} is x"
    template = Template("{{ n|double }}", filters={"double": lambda v: v * 2})
    assert template.render(n=21) == "42"
