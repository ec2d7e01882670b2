"""A griffe extension for the API reference (mkdocs.yml). headspec's docstrings are written for
pytest's doctests and for reading in the source; two of their habits render badly in MkDocs, and
this reads them as meant, leaving the source as it is:

- doctests headed ``Example:``, which the Google style reads as a plain admonition (the ``>>>``
  lines then render as nested block quotes), are read as the ``Examples:`` section, whose
  doctests render as Python code;
- Sphinx roles (``:func:`simulate```, ``:class:`~pkg.mod.Claim```), which Markdown shows as raw
  text, are read as code spans (```simulate```, ```Claim```: a ``~`` keeps the last name).
"""

from __future__ import annotations

import re

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.M)
_ROLE = re.compile(r":(?:py:)?(?:func|mod|class|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def _role(m: re.Match) -> str:
    return f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`"


class ReadableDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            text = _HEADING.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _ROLE.sub(_role, text)
