"""Text utilities: tokenizing, slugs, word wrap, case conversions and a tiny template engine.

The modules: tokenize, slug, wrap, case and template.
"""
