"""The docs as a site: Sphinx reads the Markdown pages with MyST.

`make docs` builds it with every warning an error (-W -n): a dead link, a heading a link names
that is gone, or a page no table of contents reaches fails `make test`.
"""

project = "clusterman"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
# Anchors as GitHub makes them, so the same links work on the site and in the repository.
myst_heading_anchors = 6
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "clusterman"
