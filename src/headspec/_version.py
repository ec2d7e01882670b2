"""headspec's version, in this one place.

Hatchling reads the string below for the package metadata (``[tool.hatch.version]`` in
pyproject.toml) and :data:`headspec.__version__` is this same string, so a source tree run
without installation (``PYTHONPATH=src``) or through an editable install made before a version
change reports the version of its own files. A module of its own, importing nothing: every layer
may import it (``conventions.provenance`` does, for run metadata and ``headspec --version``),
and reading it never runs ``headspec/__init__``'s imports. Change the version here and add its
section to CHANGELOG.md; tests/test_project_files.py checks CITATION.cff's version against it.
"""

__version__ = "0.1.0"
