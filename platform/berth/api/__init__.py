"""The HTTP API (SPEC §9): ``create_app`` builds the FastAPI application."""

from berth.api.app import build_services, create_app

__all__ = ["build_services", "create_app"]
