"""A griffe extension for the API reference (mkdocs.yml): headspec's docstrings head their
doctests ``Example:``, which the Google style reads as a plain admonition (the ``>>>`` lines then
render as nested block quotes); this reads it as the ``Examples:`` section, whose doctests render
as Python code. The source stays as it is (the heading means the same to pytest's doctests)."""

from __future__ import annotations

import re

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.M)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)
