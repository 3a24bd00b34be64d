"""The playground's web page (Gradio). `python app.py` starts it; `build_demo()` and `serve()` are for tests.

Modules: layout (the Page: components, handlers, and its sections built in place), the sections that own their
components and events (classroom.ClassSection, own_kernel.OwnKernel, insight_tabs.InsightTabs), common (the helpers
the page and its sections share), api (the named endpoints compile/run/tune), gateway (the one way to run_job, the
catalogue and health), controls (a kernel's declarations → dropdowns), highlight (Pygments → HTML), views (engine
JSON → HTML and tables), charts (→ Plotly figures), history (the session's runs), styles, server, mcp_tools.
Gradio is imported by layout, its sections, common, api, styles, server and mcp_tools; the others are plain functions
usable without it.
"""
from __future__ import annotations


def build_demo():
    from .layout import build_demo as build
    return build()


def serve(*args, **kwargs):
    from .server import serve as start
    return start(*args, **kwargs)


__all__ = ["build_demo", "serve"]
