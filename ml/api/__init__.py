"""Web dashboard and REST API to watch and steer ``loop.py`` (``python -m ml.api --help``).

``create_app`` builds the FastAPI app (``ml/api/app.py``); the loop is found, started and
steered through its files (``ml/api/control.py``), never through DVC.
"""

from __future__ import annotations

from ml.api.app import create_app

__all__ = ["create_app"]
