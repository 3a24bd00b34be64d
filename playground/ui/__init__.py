"""The playground's web page (Gradio). `python app.py` starts it; `build_demo()` and `serve()` are for tests.

Modules: layout (components and handlers), api (the named endpoints compile/run/tune), gateway (the one way to
run_job, the catalogue and health), controls (a kernel's declarations → dropdowns), highlight (Pygments → HTML),
views (engine JSON → HTML and tables), charts (→ Plotly figures), history (the session's runs), styles, server.
Only layout, api, styles and server import Gradio; the others are plain functions usable without it.
"""
from __future__ import annotations


def build_demo():
    from .layout import build_demo as build
    return build()


def serve(*args, **kwargs):
    from .server import serve as start
    return start(*args, **kwargs)


__all__ = ["build_demo", "serve"]
